#!/usr/bin/env bash
# On the GPU machine (docs/gpu.md): build, verify and time the GPU forms in one command, everything under $OUT.
# Carry .devcarry (scripts/device-carry.sh) and .fla (fla's package, for its kernels as a peer).
#   bash scripts/device-gpu.sh [test|bench|profile|cpu-bench]...    (default: test bench)
# cpu-bench: the CPU forms at HLA_BENCH_THREADS (default 1 2 4 8 16) on the machine's cores (issue 50): the chunked
# forms plain, gated and at the gates' mean γ, the rooflines and the fused form's phases, into $OUT/bench-cpu.json.
set -o pipefail
O=${OUT:-out-gpu}; mkdir -p "$O"
steps=${*:-test bench}
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; nproc; date -u; } > "$O/machine.txt" 2>&1
t0=$(date +%s)
targets="hla hla_tests"
[[ " $steps " == *" cpu-bench "* ]] && targets+=" hla_bench"
[[ " $steps " != *" test "* && " $steps " != *" bench "* && " $steps " != *" profile "* ]] && targets=hla_bench
(source scripts/device-build.sh $targets) > "$O/build.log" 2>&1
echo "build: rc=$? $(( $(date +%s) - t0 )) s" >> "$O/machine.txt"
BIN=build-device/bin
export HLA_COMMIT=${HLA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
for s in $steps; do
  t=$(date +%s)
  case $s in
    test)
      $BIN/hla list > "$O/list.txt" 2>&1
      timeout ${HLA_GPU_TEST_S:-240} $BIN/hla_tests "[gpu]" --durations yes > "$O/test-gpu.log" 2>&1
      echo "test: rc=$?" >> "$O/machine.txt" ;;
    bench)
      timeout ${HLA_GPU_BENCH_S:-200} python3 scripts/bench-gpu.py --hla $BIN/hla ${GPU_BENCH_ARGS:---quick --reps 5 --budget-s 150} \
        --out "$O/bench.json" > "$O/bench.log" 2>&1
      echo "bench: rc=$?" >> "$O/machine.txt" ;;
    profile)
      command -v nsys >/dev/null && timeout 120 nsys profile -o "$O/hla2" --force-overwrite true --stats=true \
        $BIN/hla gpu-bench --op hla2 --T 4096 --d 64 --dv 64 --heads 16 --reps 3 > "$O/nsys.txt" 2>&1
      echo "profile: rc=$?" >> "$O/machine.txt" ;;
    cpu-bench)
      export HLA_BENCH_THREADS=${HLA_BENCH_THREADS:-1 2 4 8 16} OPENBLAS_THREAD_TIMEOUT=4
      tl=$(echo $HLA_BENCH_THREADS | tr ' ' '|')
      f="^((hla2|ahla|linear)/chunked|hla2/chunked-fused)/(float|double)/n:65536/d:64/dv:64/threads:($tl)(/|\$)"
      f+="|^roofline/(eigen|libxsmm|blis|openblas)/|^peak/|^phase/"
      (source scripts/device-build.sh hla_bench >/dev/null 2>&1
       env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE timeout ${HLA_CPU_BENCH_S:-420} $BIN/hla_bench --benchmark_filter="$f" \
         --benchmark_repetitions=${HLA_BENCH_REPS:-3} --benchmark_enable_random_interleaving=true \
         --benchmark_out="$O/bench-cpu.json" --benchmark_out_format=json) > "$O/bench-cpu.log" 2>&1
      echo "cpu-bench: rc=$?" >> "$O/machine.txt" ;;
  esac
  echo "$s: $(( $(date +%s) - t )) s" >> "$O/machine.txt"
done
cat "$O/machine.txt"; tail -30 "$O/test-gpu.log" 2>/dev/null; tail -20 "$O/bench.log" 2>/dev/null
