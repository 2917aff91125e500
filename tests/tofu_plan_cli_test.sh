#!/usr/bin/env bash
# tofu-plan end to end: plans in both formats, the SVG, and errors for bad arguments.
set -uo pipefail
plan="$1"
fail=0
check() { # description, command...
  local what="$1"; shift
  if ! "$@"; then echo "FAILED: $what" >&2; fail=1; fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source tests/cli_lib.sh
# Under AddressSanitizer the three heaviest plans below (a budget's recomputation, --fit over
# stages, --fit on a machine: searches by time, 3 to 17 s each here) run one in turn
# (in_sample); the plain run runs them all.
detect_asan "$plan"
check "--help prints text (UTF-8, no control characters)" help_is_text "$plan"

# The operator library is found from any directory (beside the binary: its Bazel runfiles
# here, PREFIX/share/tofu/ops installed); TOFU_OPS and --ops override it, and a wrong one, or
# none found, is an error saying where it looked.
abs="$(realpath "$plan")"
(cd / && "$abs" --model mlp --train --workers 4 >"$tmp/anywhere.txt" 2>&1)
check "runs from / ($(tail -3 "$tmp/anywhere.txt"))" test $? -eq 0
(cd / && TOFU_OPS="$tmp" "$abs" --model mlp --workers 2 >"$tmp/env.txt" 2>&1)
check "a TOFU_OPS without .tdl files: exit 2" test $? -eq 2
check "a TOFU_OPS without .tdl files: named" grep -q "TOFU_OPS=$tmp: no .tdl files there" "$tmp/env.txt"
(cd / && TOFU_OPS=/nonexistent "$abs" --ops "$tmp" --model mlp --workers 2 >"$tmp/ops.txt" 2>&1)
check "--ops before TOFU_OPS, named" grep -q -- "--ops $tmp: no .tdl files there" "$tmp/ops.txt"
cp "$abs" "$tmp/tofu-plan-copy"
(cd "$tmp" && ./tofu-plan-copy --model mlp --workers 2 >"$tmp/lost.txt" 2>&1)
check "no library anywhere: exit 2" test $? -eq 2
check "no library anywhere: says where it looked" grep -q "^  $tmp/share/tofu/ops$" "$tmp/lost.txt"

"$plan" --model mlp --batch 16 --train --workers 4 >"$tmp/table.txt" 2>"$tmp/err.txt"
check "table exit status" test $? -eq 0
check "table header" grep -q "^plan: mlp training step (batch 16) on 4 workers (2 x 2), algorithm tofu" "$tmp/table.txt"
check "table per-step rows" grep -q "^| 2 | 2 | " "$tmp/table.txt"
check "table lists fc2_w" grep -q "^| fc2_w | weight | 4096x4096 | " "$tmp/table.txt"
check "table lists the ops" grep -q "^| fc1 | MatMul | " "$tmp/table.txt"

# The paper's objective cuts every tensor into k tiles where it can (the time objective may
# keep one whole on every worker).
"$plan" --model mlp --batch 16 --train --workers 6 --objective bytes --format=json --svg "$tmp/plan.svg" >"$tmp/plan.json"
check "json exit status" test $? -eq 0
check "json parses and is consistent" python3 - "$tmp/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["workers"] == 6 and p["factors"] == [3, 2], p["factors"]
assert sum(p["step_communication_bytes"]) == p["communication_bytes"]
assert p["communication_bytes_every_worker"] == p["communication_bytes"]
assert sum(o["communication_bytes"] for o in p["ops"]) == p["communication_bytes"]
w = [t for t in p["tensors"] if t["name"] == "fc2_w"][0]
g = 1
for x in w["grid"]: g *= x
assert g == 6, w
PY
check "svg written" grep -q "<title>fc1_w worker 5</title>" "$tmp/plan.svg"

# --objective time (the default) against bytes: the step estimated on --device (h100) is no
# longer, and the plan says which objective searched it.
# (One model: search_test and plan_api_test check the objective itself.)
for m in "gpt-1-16-2-4 --batch 8"; do
  "$plan" --model $m --train --workers 4 --format=json >"$tmp/ot.json"
  "$plan" --model $m --train --workers 4 --objective bytes --format=json >"$tmp/ob.json"
  check "--objective time: a step no longer than bytes' ($m)" python3 - "$tmp/ot.json" "$tmp/ob.json" <<'PY'
import json, sys
t, b = (json.load(open(p)) for p in sys.argv[1:])
assert t["objective"] == "time" and b["objective"] == "bytes", (t["objective"], b["objective"])
assert 0 < t["step_time"]["seconds"] <= b["step_time"]["seconds"], (t["step_time"]["seconds"], b["step_time"]["seconds"])
PY
done
# --explain: the chosen plan's step split into its parts, its heaviest ops, and each
# runner-up planned and priced against it, in the text and the JSON alike.
"$plan" --model gpt-1-16-2-4 --batch 8 --train --workers 4 --summary --explain >"$tmp/x.txt" 2>"$tmp/x.err"
check "--explain's text" grep -q "^why this plan (--explain): tofu by time on 4 workers" "$tmp/x.txt"
check "--explain's progress" grep -qF "tofu-plan: --explain: planning ZeRO-3 (FSDP's full sharding) (--algo zero3)" "$tmp/x.err"
"$plan" --model gpt-1-16-2-4 --batch 8 --train --workers 4 --format=json --explain >"$tmp/x.json" 2>/dev/null
check "--explain's JSON" python3 - "$tmp/x.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
x = j["explain"]
assert abs(x["step"]["seconds"] - j["step_time"]["seconds"]) < 1e-12, (x["step"], j["step_time"]["seconds"])
s = x["step"]
assert abs(s["compute_seconds"] + s["communication_seconds"] + s["bubble_seconds"] - s["seconds"]) < 1e-9, s
kinds = [r["kind"] for r in x["runner_ups"]]
assert kinds == ["megatron", "zero3", "pipeline"], kinds
for r in x["runner_ups"]:
    assert r["step"]["seconds"] > 0 and r["against_chosen"], r
assert len(x["stages"]) == 1 and len(x["stages"][0]["heaviest"]) == 3, x["stages"]
PY
for algo in dp-flat icml18 equalchop spartan allrow data-parallel zero3 megatron; do
  "$plan" --model mlp --batch 16 --train --workers 4 --algo "$algo" --summary >"$tmp/a.txt"
  check "--algo $algo" grep -q "algorithm $algo$" "$tmp/a.txt"
done
# --algo megatron without --megatron: the grid's best by the step estimated on --device.
"$plan" --model gpt-1-64-4-16 --batch 8 --train --workers 4 --algo megatron --summary >"$tmp/m.txt" 2>&1
check "--algo megatron's grid" grep -qE "megatron: TP,PP,DP by the step estimated on H100 SXM: 4,1,1 .* 2,1,2 .* 1,1,4 .*; [421],1,[124] chosen" "$tmp/m.txt"
# The paper's SmallBatch: one worker, the largest batch whose step fits the budget (the batch
# found fits, one more does not), its samples a second times the workers.
"$plan" --model gpt-2-256-4-64 --batch 64 --train --optimizer adam --workers 8 --algo smallbatch \
  --memory-per-worker 1GiB --format=json >"$tmp/sb.json"
check "--algo smallbatch" python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["algorithm"] == "smallbatch" and 1 < j["batch"] < j["asked_batch"] == 64, j
assert j["peak_bytes"] <= j["budget_bytes"] == 1 << 30 < j["over_peak_bytes"], j
assert j["over_batch"] == j["batch"] + 1, j
assert abs(j["samples_per_second"] - 8 * j["samples_per_second_one_worker"]) < 1e-6 * j["samples_per_second"], j
assert abs(j["samples_per_second_one_worker"] * j["estimated_step_seconds"] - j["batch"]) < 1e-6 * j["batch"], j' "$tmp/sb.json"

# Pipelines in JSON: the stages' table, the bytes of the execution plan (between stages and
# within them), each worker's planned peak; the paper's operator placement puts rnn-4-64's
# four LSTM layers on 3 workers in turn.
"$plan" --model gpt-2-64-4-16 --batch 8 --train --workers 4 --stages 2 --microbatches 2 --format=json >"$tmp/st.json"
check "--stages 2 --format=json" test $? -eq 0
"$plan" --model rnn-4-64 --batch 6 --train --workers 3 --algo placement --format=json >"$tmp/pl.json"
check "--algo placement --format=json" test $? -eq 0
# On a machine each stage is searched over its node: the bytes over the levels are the
# execution plan's.
"$plan" --model gpt-2-64-4-16 --batch 8 --train --topology 2x2:12.5GB/s@5us,150GB/s@1us --stages 2 --microbatches 2 --objective bytes --format=json >"$tmp/stt.json"
check "--stages 2 --topology 2x2" test $? -eq 0
# --stages auto: the candidate of least estimated step, each candidate reported.
"$plan" --model gpt-2-64-4-16 --batch 8 --train --workers 4 --stages auto --format=json >"$tmp/auto.json" 2>"$tmp/auto.err"
check "--stages auto" python3 - "$tmp/auto.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
s = j["stage_search"]
steps = [c["step_seconds"] for c in s["candidates"]]
chosen = min(s["candidates"], key=lambda c: c["step_seconds"])
assert (s["chosen_stages"], s["chosen_microbatches"]) == (chosen["stages"], chosen["microbatches"]), s
assert abs(j["step_time"]["seconds"] - chosen["step_seconds"]) < 1e-12, (j["step_time"], chosen)
assert ("pipeline" in j) == (chosen["stages"] > 1), j.keys()
PY
check "--stages auto reports each candidate" grep -q "^tofu-plan: --stages auto: 2 stages, 2 microbatches [0-9.]* ms" "$tmp/auto.err"
# A stage whose problem repeats an earlier one's takes its plan: gpt-8's middle stages.
"$plan" --model gpt-8-64-4-16 --batch 8 --train --workers 4 --stages 4 --microbatches 2 --schedule gpipe --summary >"$tmp/share.txt" 2>/dev/null
check "stage plans shared" grep -q "^stage plans: 3 searched, 1 taken from an earlier stage of the same problem under other names$" "$tmp/share.txt"
"$plan" --model gpt-8-64-4-16 --batch 8 --train --workers 4 --stages 4 --microbatches 2 --schedule gpipe --format=json 2>/dev/null |
  python3 -c 'import json, sys; s = json.load(sys.stdin)["pipeline"]["per_stage"]; sys.exit([x.get("plan_of_stage") for x in s] != [None, None, 1, None])'
check "stage plans shared: plan_of_stage" test $? -eq 0
# --fit over stages: the fewest workers, a multiple of the stages filling part of the machine.
if in_sample 1 3; then
  "$plan" --model gpt-2-64-4-16 --batch 8 --train --stages 2 --microbatches 2 --fit 30MB --topology 2x2:12.5GB/s@5us,150GB/s@1us --format=json >"$tmp/stf.json" 2>"$tmp/stf.err"
  check "--stages 2 --fit 30MB --topology 2x2" test $? -eq 0
  check "--stages --fit reports each count on stderr" grep -q "^tofu-plan: 4 workers: fits, planned peak" "$tmp/stf.err"
  check "--stages --fit's JSON" python3 - "$tmp/stf.json" <<'PY'
import json, sys
stf = json.load(open(sys.argv[1]))
f = stf["fit"]
assert stf["workers"] == f["workers"] == 4 and f["stages"] == 2 and f["budget_bytes"] == 30000000, f
assert f["tried"][-1]["workers"] == 4 and f["lower_bound"] <= 4, f
assert [s["first_worker"] for s in stf["pipeline"]["per_stage"]] == [0, 2], stf["pipeline"]
assert stf["memory"]["planned_peak_bytes"] <= 30000000, stf["memory"]
PY
fi
check "the pipelines' JSON" python3 - "$tmp/st.json" "$tmp/pl.json" "$tmp/stt.json" <<'PY'
import json, sys
st, pl, stt = (json.load(open(p)) for p in sys.argv[1:])
levels = stt["topology"]["levels"]
assert sum(l["bytes"] for l in levels) == stt["pipeline"]["bytes"] > 0, (levels, stt["pipeline"])
# Only what crosses between the stages (and what the scalars gather) leaves a node: the
# bytes between stages are those between the nodes, and each stage's own stay inside its node.
assert 0 < levels[0]["bytes"] < levels[1]["bytes"], levels
assert stt["pipeline"]["bytes_between_stages"] == levels[0]["bytes"], (levels, stt["pipeline"])
assert sum(s["bytes_inside"] for s in stt["pipeline"]["per_stage"]) == levels[1]["bytes"], stt["pipeline"]
for j in (st, pl):
    p = j["pipeline"]
    assert j["communication_bytes"] == p["bytes"] > 0, (j["communication_bytes"], p)
    assert 0 < j["memory"]["planned_peak_bytes"] == max(s["planned_peak_bytes"] for s in p["per_stage"]), j
    assert j["step_time"]["seconds"] > 0, j["step_time"]
assert not st["pipeline"]["placement"] and [s["first_worker"] for s in st["pipeline"]["per_stage"]] == [0, 2]
assert st["pipeline"]["bytes"] > st["pipeline"]["bytes_between_stages"] > 0, st["pipeline"]
assert pl["pipeline"]["placement"] and pl["pipeline"]["microbatches"] == 3 and pl["pipeline"]["schedule"] == "gpipe"
assert [s["first_worker"] for s in pl["pipeline"]["per_stage"]] == [0, 1, 2, 0], pl["pipeline"]
assert pl["pipeline"]["bytes"] == pl["pipeline"]["bytes_between_stages"] > 0, pl["pipeline"]
PY

# The paper's Swapping: with memory enough only the batch crosses the host link; in a budget
# below the step's tensors (but above its largest node) tensors go out and come back, the
# device holds at most the budget, and the step waits for the link. --topology's host link
# replaces the device's.
"$plan" --model gpt-2-256-4-64 --batch 64 --train --optimizer adam --workers 8 --algo swap \
  --memory-per-worker 4GiB --format=json >"$tmp/sw4.json"
check "--algo swap (4GiB)" test $? -eq 0
"$plan" --model gpt-2-256-4-64 --batch 64 --train --optimizer adam --workers 8 --algo swap \
  --memory-per-worker 1GiB --format=json >"$tmp/sw1.json"
check "--algo swap (1GiB)" test $? -eq 0
"$plan" --model gpt-2-256-4-64 --batch 64 --train --optimizer adam --workers 8 --algo swap \
  --memory-per-worker 1GiB --topology 8:450GB/s,host=16GB/s@3us --format=json >"$tmp/sw1t.json"
check "--algo swap --topology's host link" test $? -eq 0
check "--algo swap's figures" python3 - "$tmp/sw4.json" "$tmp/sw1.json" "$tmp/sw1t.json" <<'PY'
import json, sys
big, small, slow = (json.load(open(p)) for p in sys.argv[1:])
assert big["algorithm"] == "swap" and big["bytes_to_host"] == 0 and big["dropped_bytes"] == 0, big
assert big["device_peak_bytes"] <= big["tensor_peak_bytes"] <= big["budget_bytes"], big
assert small["largest_node_bytes"] <= small["device_peak_bytes"] <= small["budget_bytes"] < small["tensor_peak_bytes"], small
assert small["bytes_to_host"] > 0 and small["bytes_to_device"] > big["bytes_to_device"], small
assert small["estimated_step_seconds"] >= small["bytes_to_device"] / small["host_bandwidth"], small
assert small["estimated_step_seconds"] > big["estimated_step_seconds"] >= big["compute_seconds"], (small, big)
assert abs(small["samples_per_second"] - 8 * 64 / small["estimated_step_seconds"]) < 1e-6 * small["samples_per_second"], small
assert slow["host_bandwidth"] == 16e9 and slow["estimated_step_seconds"] > small["estimated_step_seconds"], slow
PY

expect_error() { # expected message, args...
  local msg="$1"; shift
  if "$plan" "$@" >"$tmp/out.txt" 2>"$tmp/err.txt"; then
    echo "FAILED: expected an error for: $*" >&2; fail=1; return
  fi
  if ! grep -qF -- "$msg" "$tmp/err.txt"; then
    echo "FAILED: for '$*' expected '$msg', got:" >&2; cat "$tmp/err.txt" >&2; fail=1
  fi
}
expect_error "--workers must be 1 to 4096" --model mlp --workers 0
expect_error "--explain explains a plan: give --workers K or --fit BYTES (not --describe or --dump-json)" --model mlp --describe --explain
expect_error "--explain explains a partition; --algo swap plans none" --model mlp --train --workers 2 --algo swap --memory-per-worker 1GB --explain
expect_error "--stages auto chooses the microbatches too" --model gpt-2-64-4-16 --batch 8 --train --workers 4 --stages auto --microbatches 2
expect_error "--stages auto chooses the stages: --megatron fixes them" --model gpt-2-64-4-16 --batch 8 --train --workers 4 --stages auto --megatron 2,2,1
expect_error "for the --objective option: must be time or bytes, not 'speed'" --model mlp --workers 2 --objective speed
expect_error "for the --algo option: must be tofu, dp-flat, icml18, equalchop, spartan, allrow, data-parallel, zero3, megatron, smallbatch, placement, swap or exhaustive, not 'best'" --model mlp --workers 2 --algo best
expect_error "for the --format option: must be table or json, not 'xml'" --model mlp --workers 2 --format xml
expect_error "--svg draws one partition's tiles; a pipeline has one per stage" --model mlp --train --workers 2 --algo placement --svg "$tmp/p.svg"
expect_error "no plan on at most 2 workers fits in 28.61 MiB per worker as 2 stages: the weights and optimiser state alone (96.05 MiB) need 4 workers" --model gpt-2-64-4-16 --batch 8 --train --stages 2 --microbatches 2 --fit 30MB --max-workers 2
expect_error "--algo placement makes each worker a stage: --fit has no count to choose" --model rnn-4-64 --batch 6 --train --algo placement --fit 1GB
expect_error "--megatron 1,2,1: TP x PP x DP fixes the workers at 2: a search for the fewest that fit has no count to choose" --model gpt-2-64-4-16 --batch 8 --train --megatron 1,2,1 --fit 1GB
"$plan" --model mlp --batch 16 --train --fit 20MiB --format=json >"$tmp/fit.json" 2>"$tmp/fit.err"
check "--fit exit status" test $? -eq 0
check "--fit reports each count on stderr" grep -q "^tofu-plan: [0-9]* workers: fits, planned peak" "$tmp/fit.err"
check "--fit json" python3 - "$tmp/fit.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
f, m = p["fit"], p["memory"]
assert f["budget_bytes"] == 20 << 20 and p["workers"] == f["workers"], f
assert f["tried"][-1]["workers"] == f["workers"] and f["lower_bound"] <= f["workers"], f
assert m["planned_peak_bytes"] <= m["budget_bytes"] == 20 << 20, m
assert all(t["closest_peak_bytes"] > 20 << 20 for t in f["tried"][:-1]), f
# By time, the counts beyond the fewest: doubled while the worker-seconds fall, the fewest kept.
t = f["by_time"]
ks = [c["workers"] for c in t["counts"]]
assert ks[0] == f["workers"] == t["kept_workers"] and all(b == 2 * a for a, b in zip(ks, ks[1:])), t
assert len(ks) >= 2 and t["stopped"], t
least = min(t["counts"], key=lambda c: c["worker_seconds"])
assert t["least_worker_seconds_workers"] == least["workers"], t
assert all(abs(c["worker_seconds"] - c["workers"] * c["step_seconds"]) < 1e-12 for c in t["counts"]), t
PY
check "--fit by time on stderr" grep -q "^tofu-plan: --fit by time: [0-9]* workers, [0-9.]* ms a step" "$tmp/fit.err"
"$plan" --model mlp --batch 16 --train --workers 4 --memory-per-worker 1GiB --summary >"$tmp/mem.txt"
check "--memory-per-worker fits" grep -q "^planned peak (memory planner.*budget 1.00 GiB per worker" "$tmp/mem.txt"
expect_error "no plan found for 4 workers fits in 1.00 MiB per worker, even recomputing every forward tensor the backward pass reads: the closest (tofu)" --model mlp --train --workers 4 --memory-per-worker 1MiB
expect_error "no plan found for 4 workers fits in 1.00 MiB per worker: the closest (tofu) has a planned peak of" --model mlp --workers 4 --memory-per-worker 1MiB
expect_error "--memory-per-worker needs --workers K" --model mlp --memory-per-worker 1GB
expect_error "--fit chooses the number of workers" --model mlp --workers 2 --fit 1GB
expect_error "--fit: 'lots' is not a number of bytes" --model mlp --fit lots
expect_error "unknown unit 'XB'" --model mlp --workers 2 --memory-per-worker 3XB
expect_error "no plan on at most 2 workers" --model mlp --train --fit 10MiB --max-workers 2
expect_error "ran out of its time budget" --model wresnet-50-1 --batch 2 --train --workers 8 --algo exhaustive --budget 0.5
"$plan" --model wresnet-50-1-i32-c8-k10 --batch 16 --train --topology 2x4:12.5GB/s@5us,150GB/s@1us --objective bytes --format=json >"$tmp/topo.json"
check "--topology exit status" test $? -eq 0
check "--topology json: fewer bytes between nodes, a lower estimate" python3 - "$tmp/topo.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
t = p["topology"]
assert p["workers"] == 8 and [l["name"] for l in t["levels"]] == ["node", "gpu"], t
assert sum(l["bytes"] for l in t["levels"]) == p["communication_bytes"], t
assert t["levels"][0]["bytes"] < t["levels"][0]["least_bytes_plan_bytes"], t
assert 0 < t["estimated_seconds_slowest_worker"] < t["least_bytes_plan_estimated_seconds_slowest_worker"], t
assert not t["least_bytes_plan_chosen"] and "estimate" in t, t
PY
"$plan" --model mlp --batch 16 --train --topology 2x4:12.5GB/s,150GB/s --summary >"$tmp/topo.txt"
check "--topology table" grep -q "^| between gpus of one node | " "$tmp/topo.txt"
check "--topology estimate labelled" grep -q "^estimated communication time per step (an estimate: " "$tmp/topo.txt"
expect_error "--workers 4 but the topology has 8 workers" --model mlp --topology 2x4:1GB/s,10GB/s --workers 4
expect_error "2 levels but 1 bandwidth" --model mlp --topology 2x4:12.5GB/s
expect_error "faster than level 2 inside it" --model mlp --topology 2x4:150GB/s,12.5GB/s
# On a machine, --fit tries the counts that fill part of it (1 to 4, then 8 of 2x4), each
# searched over the levels it fills; --memory-per-worker searches every plan over them.
if in_sample 2 3; then
  "$plan" --model gpt-2-256-4-64 --batch 16 --train --optimizer sgd --fit 100MiB \
    --topology 2x4:12.5GB/s@5us,150GB/s@1us --format=json >"$tmp/topofit.json" 2>"$tmp/topofit.err"
  check "--fit --topology exit status" test $? -eq 0
  check "--fit --topology json: a count that fills part of the machine, its levels" python3 - "$tmp/topofit.json" "$tmp/topofit.err" <<'PY'
import json, re, sys
p = json.load(open(sys.argv[1]))
tried = [int(k) for k in re.findall(r"^tofu-plan: (\d+) workers:", open(sys.argv[2]).read(), re.M)]
assert tried and all(k in (1, 2, 3, 4, 8) for k in tried), tried
k, t = p["workers"], p["topology"]
assert k in (1, 2, 3, 4, 8) and p["fit"]["workers"] == k, p["fit"]
assert p["memory"]["planned_peak_bytes"] <= 100 * 2**20, p["memory"]
levels = [(l["name"], l["count"]) for l in t["levels"]]
assert levels == ([("gpu", k)] if k <= 4 else [("node", 2), ("gpu", 4)]), levels
assert sum(l["bytes"] for l in t["levels"]) == p["communication_bytes"], t
assert "least_bytes_plan_bytes" not in t["levels"][0], t
PY
fi
"$plan" --model gpt-2-256-4-64 --batch 16 --train --optimizer sgd --memory-per-worker 100MiB \
  --topology 2x4:12.5GB/s@5us,150GB/s@1us --summary >"$tmp/topobudget.txt" 2>/dev/null
check "--memory-per-worker --topology exit status" test $? -eq 0
check "--memory-per-worker --topology: the machine's levels" grep -q "^machine: 2 nodes .*; every plan under the budget searched over them" "$tmp/topobudget.txt"
check "--memory-per-worker --topology: traffic between nodes" grep -q "^| between nodes | " "$tmp/topobudget.txt"
check "--memory-per-worker --topology: within the budget" grep -q "; budget 100.00 MiB per worker (.* spare)" "$tmp/topobudget.txt"
expect_error "no plan on at most 8 workers can fit in 1.00 KiB" --model mlp --train --fit 1KiB --recompute none --topology 2x4:1GB/s,10GB/s
expect_error "--fit chooses the number of workers: give it without --workers" --model mlp --train --fit 1GB --topology 2x4:1GB/s,10GB/s --workers 8
# --recompute: segment checkpointing without a budget; auto under a budget the plan without
# recomputation exceeds (the small WResNet at 0.6x its peak), and the errors.
"$plan" --model mlp --batch 2048 --train --optimizer sgd --workers 2 --recompute sqrt --summary >"$tmp/sqrt.txt"
check "--recompute sqrt" grep -q "^recomputation (sqrt): [0-9]* of [0-9]* forward tensors dropped" "$tmp/sqrt.txt"
if in_sample 0 3; then
  "$plan" --model wresnet-50-1-i32-c8-k10 --batch 32 --train --optimizer sgd --workers 2 \
    --memory-per-worker 3.6MiB --format=json >"$tmp/rec.json" 2>"$tmp/rec.err"
  check "--memory-per-worker with recomputation exit status" test $? -eq 0
  check "--memory-per-worker reports each candidate set" grep -q "^tofu-plan: recomputing [0-9]* tensors: fits" "$tmp/rec.err"
  check "--recompute auto json" python3 - "$tmp/rec.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
r, m = p["recompute"], p["memory"]
budget = int(3.6 * 2**20)
assert r["mode"] == "auto" and 0 < len(r["dropped"]) < r["candidates"], r
assert r["planned_peak_bytes"] <= budget < r["planned_peak_bytes_without"], r
assert m["planned_peak_bytes"] == r["planned_peak_bytes"] and m["budget_bytes"] == budget, m
assert r["estimated_seconds"] > r["estimated_seconds_without"] > 0, r
PY
fi
expect_error "for the --recompute option: must be auto, sqrt or none, not 'all'" --model mlp --train --workers 2 --recompute all
expect_error "--recompute applies to a training step" --model mlp --workers 2 --recompute sqrt
expect_error "--recompute auto recomputes what a memory budget needs" --model mlp --train --workers 2 --recompute auto
# --precision bf16: bfloat16 activations and gradients, float32 weights and state, casts as
# ops, and less traffic than float32 for the same model and workers.
"$plan" --model mlp --batch 16 --train --workers 4 --objective bytes --format=json >"$tmp/fp32.json"
"$plan" --model mlp --batch 16 --train --workers 4 --precision bf16 --objective bytes --format=json >"$tmp/bf16.json"
check "--precision bf16 exit status" test $? -eq 0
check "--precision bf16: dtypes, casts and traffic" python3 - "$tmp/fp32.json" "$tmp/bf16.json" <<'PY'
import json, sys
fp32, bf16 = (json.load(open(f)) for f in sys.argv[1:])
assert "precision" not in fp32 and bf16["precision"]["name"] == "bf16", bf16.get("precision")
assert bf16["precision"]["casts"] > 0 and bf16["precision"]["lowered_ops"] > 0, bf16["precision"]
dtype = {t["name"]: (t["role"], t["dtype"]) for t in bf16["tensors"]}
for name, (role, d) in dtype.items():
    if role in ("weight", "optimizer_state"):
        assert d == "float32", (name, role, d)
assert sum(d == "bfloat16" for r, d in dtype.values()) == bf16["precision"]["bf16_tensors"]
assert any(r == "gradient" and d == "bfloat16" for r, d in dtype.values()), dtype
assert all(t["dtype"] == "float32" for t in fp32["tensors"] if t["role"] != "input")
assert bf16["communication_bytes"] < fp32["communication_bytes"], \
    (bf16["communication_bytes"], fp32["communication_bytes"])
PY
# An ONNX Linear on a rank-3 input (MatMul, then Add of the bias unsqueezed and expanded)
# gives a bfloat16 result, as autocast's linear does: the bias is cast where the chain
# starts. (Until 2026-11-29 the float32 chain promoted every such Add to float32.) A
# softmax or layer norm that only products read stores its result in bfloat16.
"$plan" --onnx tests/onnx/gpt_block.onnx --precision bf16 --dump-json >"$tmp/gpt_bf16.json"
check "--precision bf16 on gpt_block exit status" test $? -eq 0
check "--precision bf16: a rank-3 Linear's bias add is bfloat16" python3 - "$tmp/gpt_bf16.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
dtype = {t["name"]: t.get("dtype", "float32") for t in g["tensors"]}
adds = [n for n in g["nodes"] if n["op"] == "Add" and n["name"].endswith("/Add")
        and any(i.endswith("MatMul_output_0") for i in n["inputs"])]
assert len(adds) >= 4, [n["name"] for n in adds]
for n in adds:
    assert dtype[n["output"]] == "bfloat16", (n["name"], dtype[n["output"]])
casts = {n["inputs"][0] for n in g["nodes"] if n["op"] == "CastBfloat16"}
assert "out.bias" in casts and "qkv.bias" in casts, sorted(casts)
soft = [n for n in g["nodes"] if n["op"] == "Softmax"]
assert soft and all(dtype[n["output"]] == "bfloat16" for n in soft), soft
PY
# nn.MultiheadAttention packs its projections' biases in one in_proj_bias, which the export
# slices: a slice of a bias is still a bias, rounded once with its product (3 linears).
"$plan" --onnx tests/onnx/attention.onnx --precision bf16 --describe >"$tmp/mha_bf16.txt"
check "--precision bf16: nn.MultiheadAttention's sliced biases round once with their products" \
  grep -q "(3 rounded once with their bias)" "$tmp/mha_bf16.txt"
# nn.GELU, which the export spells out in five ops, is one Gelu op again in bf16.
"$plan" --onnx tests/onnx/gpt_block.onnx --precision bf16 --describe >"$tmp/gelu_bf16.txt"
check "--precision bf16: the exported GELU joined into one op" \
  grep -q "; 1 GELU the export spelled out in five ops joined into one" "$tmp/gelu_bf16.txt"
expect_error "must be fp32 or bf16, not 'fp16'" --model mlp --workers 2 --precision fp16
# The estimated step time: on an H100 by default; the JSON's phases sum to it (fp32 and
# bf16); an A100 is slower on the same plan (the bytes objective's, which no device
# changes); a device model file is read; an unknown device is refused
# before any planning.
check "step time on the default H100" grep -q "^estimated step time on H100 SXM (data sheet" "$tmp/table.txt"
"$plan" --model mlp --batch 16 --train --workers 4 --device a100 --objective bytes --format=json >"$tmp/a100.json"
check "--device a100 exit status" test $? -eq 0
check "--device: the phases, the workers and the devices" python3 - "$tmp/fp32.json" "$tmp/a100.json" "$tmp/bf16.json" <<'PY'
import json, sys
h, a, b = (json.load(open(f))["step_time"] for f in sys.argv[1:])
assert h["device"]["name"] == "H100 SXM" and a["device"]["name"] == "A100 SXM 80GB", (h, a)
for e in (h, a, b):
    assert len(e["workers"]) == 4
    w = e["workers"][e["slowest_worker"]]
    total = w["forward_seconds"] + w["backward_seconds"] + w["update_seconds"] + w["communication_seconds"]
    assert abs(total - e["seconds"]) <= 1e-12 * e["seconds"], (total, e["seconds"])
    assert all(x["forward_seconds"] + x["backward_seconds"] + x["update_seconds"] +
               x["communication_seconds"] <= e["seconds"] * (1 + 1e-12) for x in e["workers"])
assert a["seconds"] > h["seconds"], (a["seconds"], h["seconds"])
PY
python3 - "$tmp/a100.json" "$tmp/device.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["step_time"]["device"]
d["name"] = "half an A100"
d["product_flops"] /= 2
json.dump(d, open(sys.argv[2], "w"))
PY
"$plan" --model mlp --batch 16 --train --workers 4 --device "$tmp/device.json" --summary >"$tmp/devfile.txt"
check "--device FILE" grep -q "^estimated step time on half an A100" "$tmp/devfile.txt"
expect_error "--device: 'tpu' is neither a device (h100, a100, cpu) nor a readable device model file" --model mlp --workers 2 --device tpu
TOFU_CPU_MODEL="$tmp/none.json" "$plan" --model mlp --workers 2 --device cpu >"$tmp/out.txt" 2>"$tmp/err.txt"
check "--device cpu without a calibration: exit 2" test $? -eq 2
check "--device cpu without a calibration: says how" grep -qF "no model of this machine at $tmp/none.json: \`tofu-run --calibrate\` measures one" "$tmp/err.txt"
# --input: an ONNX model whose Reshape reads its shape from a graph input imports once the
# input's values are given (as tofu-run --infer takes them), and is refused, naming the
# input, without them.
node=/usr/share/libonnx-testdata/data/node/test_reshape_reordered_all_dims
if [ ! -d "$node" ]; then
  echo "FAILED: $node is missing: install libonnx-testdata (tools/setup.sh does)" >&2
  fail=1
else
  "$plan" --onnx "$node/model.onnx" --data-inputs 2 --describe >"$tmp/noinput.txt" 2>&1
  check "a shape input without values: exit 1" test $? -eq 1
  check "a shape input without values: named" grep -q "its shape ('shape') must be a constant" "$tmp/noinput.txt"
  "$plan" --onnx "$node/model.onnx" --data-inputs 2 --dump-json \
    --input "data=$node/test_data_set_0/input_0.pb,shape=$node/test_data_set_0/input_1.pb" >"$tmp/input.json" 2>&1
  check "--input gives the shape's values ($(tail -2 "$tmp/input.json"))" test $? -eq 0
  check "--input: the output's shape is the one given" python3 -c '
import json, sys
g = json.load(open(sys.argv[1]))
shapes = {t["name"]: t["shape"] for t in g["tensors"]}
assert shapes["reshaped"] == [4, 2, 3], shapes' "$tmp/input.json"
  "$plan" --onnx "$node/model.onnx" --data-inputs 2 --describe --input "data=$node/test_data_set_0/input_1.pb" >"$tmp/badshape.txt" 2>&1
  check "--input of the wrong shape: exit 1" test $? -eq 1
  check "--input of the wrong shape: named" grep -q "the value given for input 'data' has shape \[3\]; the model declares \[2, 3, 4\]" "$tmp/badshape.txt"
  "$plan" --onnx "$node/model.onnx" --describe --input "nosuch=$node/test_data_set_0/input_1.pb" >"$tmp/noname.txt" 2>&1
  check "--input of no data input: named" grep -q "'nosuch', which is not one of the model's data inputs" "$tmp/noname.txt"
  "$plan" --model mlp --input "x=$node/test_data_set_0/input_1.pb" >"$tmp/zoo.txt" 2>&1
  check "--input with a zoo model: exit 2" test $? -eq 2
  "$plan" --onnx "$node/model.onnx" --describe --input "shape" >"$tmp/item.txt" 2>&1
  check "--input item without a file: exit 2" test $? -eq 2
  check "--input item without a file: named" grep -q "'shape' is not NAME=FILE" "$tmp/item.txt"
fi

exit $fail
