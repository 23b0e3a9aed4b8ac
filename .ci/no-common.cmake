# Read by CMake at llama.cpp's project() in CI's build of llama-cpp-python (CMAKE_PROJECT_llama.cpp_INCLUDE in
# .ci/run): llama.cpp's common library is left out. llama-cpp-python turns it on and ships it (lib/libllama-common.so)
# but its bindings load only llama and ggml; the library is 58% of the build's CPU. A plain variable hides the
# cache entry that llama-cpp-python forces on.
set(LLAMA_BUILD_COMMON OFF)
