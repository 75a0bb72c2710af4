"""The command line: the `mechmem` command (`main` dispatches), one module per subcommand, and their shared
plumbing: `runner` (one-line errors, interrupts), `args` (the parser and flags), `load` and `output`:

    parser = cli.analysis_parser(prog, __doc__, n_samples=64)  # CKPT, --out, --seed, ...; errors: exit 2
    parser.add_argument("--top-k", type=cli.int_range(1))   # every number is range-checked by its type
    args = parser.parse_args(argv)                          # no torch yet: --help and usage errors are fast
    ckpt, out = cli.load_for_analysis(args)                 # every check, then the checkpoint and task
    from mechmem.analysis.x import ...                      # heavy imports after the checks
    files = cli.skipped(reason, "x.json")                   # does not apply: `skipped: REASON`, exit 0
    cli.write_outputs(out, {"x.json": obj, "x.png": fig})   # staged, then renamed together (mechmem.io)

Each analysis subcommand is `parser(prog)`, `outputs(ckpt, args)` (the files it writes) and
`main = cli.analysis_main(parser, outputs)`; `mechmem analyse` stages every `outputs` under OUT/NAME/.
Nothing here imports torch at import time.
"""

from mechmem.cli.args import (
    MAX_SAMPLES,
    MAX_STEPS,
    ArgumentParser,
    UsageError,
    add_analysis_args,
    add_memory_flag,
    add_nonfinite_flag,
    add_task_module_arg,
    add_threads_flag,
    analysis_parser,
    device_name,
    input_file,
    input_path,
    int_range,
    intervention_spec,
    memory_mb,
    nonnegative_int,
    positive_float,
    positive_int,
    positive_int_list,
    sample_count,
    seed_int,
    share,
    step_count,
    thread_count,
)
from mechmem.cli.load import check_out_dir, load_for_analysis
from mechmem.cli.output import analysis_main, skipped, stage_outputs, write_outputs
from mechmem.cli.runner import claim_out, run_script
from mechmem.errors import one_line
from mechmem.io import dumps, strict_json, write_json
from mechmem.tables import format_table, print_table

__all__ = [
    "MAX_SAMPLES",
    "MAX_STEPS",
    "ArgumentParser",
    "UsageError",
    "add_analysis_args",
    "add_memory_flag",
    "add_nonfinite_flag",
    "add_task_module_arg",
    "add_threads_flag",
    "analysis_main",
    "analysis_parser",
    "check_out_dir",
    "claim_out",
    "device_name",
    "dumps",
    "format_table",
    "input_file",
    "input_path",
    "int_range",
    "intervention_spec",
    "load_for_analysis",
    "memory_mb",
    "nonnegative_int",
    "one_line",
    "positive_float",
    "positive_int",
    "positive_int_list",
    "print_table",
    "run_script",
    "sample_count",
    "seed_int",
    "share",
    "skipped",
    "stage_outputs",
    "step_count",
    "strict_json",
    "thread_count",
    "write_json",
    "write_outputs",
]
