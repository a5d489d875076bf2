"""kvconform benchmarks: oracle throughput, reuse speedup against its physical limit,
paged-attention overhead, suite throughput and memory. Entry points: `python -m benchmarks`
(CPU, writes benchmarks/results/cpu.*) and benchmarks/gpu.sh (CUDA). See benchmarks/README.md."""
