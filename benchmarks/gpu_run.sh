#!/usr/bin/env bash
# One short GPU session, prepared here and run there in one command: the published-schedule work a 2-core
# machine cannot finish, and the report's cost on CUDA. Everything runs at once and stops at a deadline;
# what finished is merged into OUT every 15 s, so a run cut short still returns its finished records.
#
#   benchmarks/gpu_run.sh OUT DEADLINE_S [TABLE_ORDER_FILE]
#
# Jobs (all with --device cuda):
#   - E7 at d = 32 at the authors' schedule (100,000 / 5,000), both models (the `nb` and `full` scaling
#     variants), each cell's fact counts trained in one stack (--all-at-once); the trainings committed in
#     docs/reproductions/data/facts_trials.jsonl are read (--trials on a copy), so only the counts the
#     searches can still try are trained, and the new ones come back in OUT/facts_trials.jsonl;
#   - the Table B.1 variants named one per line in TABLE_ORDER_FILE at 50,000 / 5,000, at most TABLE_JOBS
#     (default 8) at a time, in the file's order;
#   - the Birth statements at the paper's sizes (rung R4: d = 128, T = 256, batch 512), one process each;
#   - benchmarks/report_scaling.py on 8 x 256 and 12 x 768 x 12 (--skip-circuit).
# JOBS names the groups to run (default "e7 birth report table"). On 2026-12-04 twelve capacity processes on one
# H200 finished none in 7.7 minutes (docs/record/2026-12-04-gpu-session.md): give E7 the GPU alone, JOBS="e7".
# OUT receives: log.txt, env.txt, facts_table.jsonl, facts_scaling.jsonl, facts_trials.jsonl (new lines only),
# birth_R4.jsonl, report_gpu.json.
# Needs transformer-lens and its missing dependencies importable (the caller installs them). A dry run on a CPU:
#   DEVICE=cpu E7_DS=8 E7_EPOCHS=20 TABLE_EPOCHS=20 PATIENCE=5 RUNG=RT RULES=rules.json REPORT_SIZES=1x16 \
#       benchmarks/gpu_run.sh /tmp/out 120 order.txt
set -u
OUT=${1:?usage: gpu_run.sh OUT DEADLINE_S [TABLE_ORDER_FILE]}
DEADLINE=${2:?usage: gpu_run.sh OUT DEADLINE_S [TABLE_ORDER_FILE]}
ORDER=${3:-}
TABLE_JOBS=${TABLE_JOBS:-8}
JOBS=${JOBS:-e7 birth report table}  # which of the four job groups run
DEVICE=${DEVICE:-cuda}
E7_EPOCHS=${E7_EPOCHS:-100000}
E7_DS=${E7_DS:-32}
TRIALS=${TRIALS:-docs/reproductions/data/facts_trials.jsonl}  # trainings finished before (read, not changed)
TABLE_EPOCHS=${TABLE_EPOCHS:-50000}
PATIENCE=${PATIENCE:-5000}
RUNG=${RUNG:-R4}
RULES=${RULES:-docs/reproductions/data/birth_rules.json}
REPORT_SIZES=${REPORT_SIZES:-8x256x8 12x768x12}
START=$(date +%s)
END=$((START + DEADLINE))
WORK=$(mktemp -d)
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
PY=${PY:-python3}
mkdir -p "$OUT"

log() { echo "[$(date -u +%T) +$(($(date +%s) - START))s] $*" | tee -a "$OUT/log.txt"; }
left() { echo $((END - $(date +%s))); }

merge() {  # finished records so far, each file replaced atomically
    local name
    for name in facts_table facts_scaling birth_R4; do
        if compgen -G "$WORK/$name.*.jsonl" >/dev/null; then
            cat "$WORK/$name".*.jsonl >"$OUT/.$name.tmp" && mv "$OUT/.$name.tmp" "$OUT/$name.jsonl"
        fi
    done
    if compgen -G "$WORK/facts_trials.*.jsonl" >/dev/null; then  # the trainings the copies did not hold
        cat "$WORK"/facts_trials.*.jsonl | { if [ -s "$TRIALS" ]; then grep -vxF -f "$TRIALS"; else cat; fi; } \
            >"$OUT/.facts_trials.tmp"
        mv "$OUT/.facts_trials.tmp" "$OUT/facts_trials.jsonl"
    fi
}

# Preflight, so a broken set-up fails in seconds (and can be rerun on the still-warm machine).
if ! "$PY" -c "import transformer_lens" 2>"$WORK/import.err"; then
    log "transformer_lens import failed: $(tail -1 "$WORK/import.err")"
    if [ -n "${EXTRA_WHEELS:-}" ] && [ -n "${EXTRA_TARGET:-}" ]; then
        # shellcheck disable=SC2086
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$EXTRA_TARGET" $EXTRA_WHEELS && log "installed $EXTRA_WHEELS"
    fi
    "$PY" -c "import transformer_lens" 2>>"$OUT/log.txt" || { log "preflight failed: no transformer_lens"; exit 3; }
fi
if ! timeout 120 "$PY" - >>"$OUT/log.txt" 2>&1 <<SMOKE
import time, torch
from mechmem_papers.memorisation.batched import Schedule, train_counts
from mechmem.tasks.facts import fact_sequence
from mechmem.models.facts import FactsModelConfig
from mechmem_papers.birth.scale import train_cell
t = time.time()
out = train_counts(FactsModelConfig(mixing="attn"), *fact_sequence(64, 32, 16), [16, 64], [0, 1],
                   Schedule(max_epochs=30, patience=5), device="$DEVICE")
print("smoke facts", {n: o.n_success for n, o in out.items()}, round(time.time() - t, 1), "s")
t = time.time()
rec = train_cell(n_layers=1, fixed_triggers=True, d_model=16, seq_len=32, batch_size=8, steps=5,
                 final_sequences=16, device="$DEVICE")
print("smoke birth", rec["final"]["icl_acc"], round(time.time() - t, 1), "s")
SMOKE
then
    log "preflight failed: smoke test"
    tail -20 "$OUT/log.txt"
    exit 3
fi
log "preflight ok"
{ nvidia-smi; nproc; "$PY" -c "import torch, transformers, transformer_lens, importlib.metadata as m
print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name(0))
print('transformers', transformers.__version__, 'transformer-lens', m.version('transformer-lens'))"; } \
    >"$OUT/env.txt" 2>&1
log "env: $(tail -2 "$OUT/env.txt" | tr '\n' ' ')"

# MPS lets the many small processes' kernels share the GPU; keep it only if a CUDA client then works.
if [ "$DEVICE" = cpu ]; then
    log "CPU dry run"
elif command -v nvidia-cuda-mps-control >/dev/null; then
    export CUDA_MPS_PIPE_DIRECTORY=$WORK/mps CUDA_MPS_LOG_DIRECTORY=$WORK/mpslog
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d && timeout 60 "$PY" -c "import torch; torch.ones(1, device='cuda').sum().item()"; then
        log "MPS on"
    else
        echo quit | nvidia-cuda-mps-control 2>/dev/null
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
        log "MPS failed; without it"
    fi
else
    log "no MPS control; without it"
fi

pids=()
run() {  # run NAME CMD...: in the background, stopped at the deadline
    local name=$1
    shift
    (timeout "$(left)" "$@" >"$WORK/$name.log" 2>&1; echo "rc=$?" >>"$WORK/$name.log"; log "$name ended: $(tail -1 "$WORK/$name.log")") &
    pids+=($!)
}

FACTS="-m mechmem_papers.memorisation.scripts.sweep_facts"
want() { case " $JOBS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
want e7 && for variant in nb full; do
    cp "$TRIALS" "$WORK/facts_trials.$variant.jsonl" 2>/dev/null || : >"$WORK/facts_trials.$variant.jsonl"
    run "e7_$variant" "$PY" $FACTS scaling --variant "$variant" --ds "$E7_DS" --max-epochs "$E7_EPOCHS" \
        --patience "$PATIENCE" --device "$DEVICE" --all-at-once --data "$WORK/facts_scaling.$variant.jsonl" \
        --trials "$WORK/facts_trials.$variant.jsonl"
done
want birth && for key in two_layer_fixed two_layer_random one_layer_random one_layer_fixed; do
    run "birth_$key" "$PY" -m mechmem_papers.birth.scripts.scale --rules "$RULES" --rung "$RUNG" \
        --statements "$key" --device "$DEVICE" --records "$WORK/birth_R4.$key.jsonl"
done
# shellcheck disable=SC2086
want report && run report "$PY" benchmarks/report_scaling.py --sizes $REPORT_SIZES --device "$DEVICE" --skip-circuit \
    --out "$OUT/report_gpu.json"
if [ -n "$ORDER" ] && want table; then
    # shellcheck disable=SC2016
    xargs -a "$ORDER" -d '\n' -P "$TABLE_JOBS" -I{} bash -c '
        n=$(echo "$1" | tr "+/" "__"); t=$(($2 - $(date +%s)))
        if [ "$t" -le 0 ]; then echo "table $1 not started"; exit 0; fi
        timeout "$t" "$3" -m mechmem_papers.memorisation.scripts.sweep_facts table --only "$1" \
            --max-epochs "$5" --patience "$6" --device "$7" --all-at-once --data "$4/facts_table.$n.jsonl" \
            >"$4/table.$n.log" 2>&1
        echo "table $1 rc=$? at $(date -u +%T)"' _ {} "$END" "$PY" "$WORK" "$TABLE_EPOCHS" "$PATIENCE" \
        "$DEVICE" >>"$WORK/table.log" 2>&1 &
    pids+=($!)
fi

while [ "$(left)" -gt 0 ] && [ -n "$(jobs -rp)" ]; do
    sleep 15
    merge
    log "running: $(jobs -rp | wc -l) groups; $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader)"
done
wait
merge
cat "$WORK/table.log" 2>/dev/null | tee -a "$OUT/log.txt"
for f in "$WORK"/*.log; do
    echo "== $(basename "$f")"
    tail -5 "$f"
done >>"$OUT/log.txt"
for name in facts_table facts_scaling facts_trials birth_R4; do
    log "$name: $(cat "$OUT/$name.jsonl" 2>/dev/null | wc -l) records"
done
