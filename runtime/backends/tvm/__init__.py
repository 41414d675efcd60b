"""The TVM backends. Shared: the Relax import and its clean-up passes (relax_import.py), the one
lowering pipeline (lowering.py), the Relax adapter of the fusion planner (fusion.py), the compile
and load every TVM backend runs (backend.py: TvmBackend, which lists what a new backend
provides) and the executable with its host copies, VM and profiling (executable.py). Per target:
llvm.py (the cpu) with its schedules and kernel rules (llvm_schedules.py), and cuda.py (the
gpu: LLVM's NVPTX back end, PTX checks) with its schedules (gpu_schedules.py: dlight's rules and
gdp's fixes around them)."""
