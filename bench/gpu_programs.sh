# shellcheck shell=bash
# The CUDA test programs and the programs bench/gpu_check.sh runs, in one place:
# gpu_check.sh runs them and bench/gpu_bundle.sh packs them. Sourced, not run.
# shellcheck disable=SC2034  # read by the scripts that source this file
GPU_TESTS=(kernels_cuda_backend_test kernels_moe_cuda_test
  kernels_serving_cuda_paged_attention_test kernels_serving_cuda_model_test
  kernels_step_runner_test training_cuda_test)
GPU_PROGRAMS=(cuda_kernels layer_step moe_layer paratune-train paratune-coordinator
  paratune-worker paratune expert_gemm_cuda serving_accuracy step_accuracy)
