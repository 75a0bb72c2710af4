"""Side checks of the permutation page's unknowns, each judged by a rule in
docs/record/2026-12-07-permutation-sources.md: `accumulated_grads` (the loop as printed), `batch_check` (the
batch size), `model_check` (the authors' model class), `split_prior` (the train/test split). The whole
reproduction runs from `analyses/reproduce.py permutation`."""
