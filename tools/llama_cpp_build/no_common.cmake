# Included after every project() call of the llama-cpp-python build (CMAKE_PROJECT_INCLUDE).
# llama-cpp-python's CMakeLists forces LLAMA_BUILD_COMMON ON (a cache FORCE that CMAKE_ARGS cannot undo);
# the low-level API needs only libllama and libggml, so it is switched off again once llama.cpp's own
# project() has run, before its option() reads the cache.
if(PROJECT_NAME STREQUAL "llama.cpp")
    set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library" FORCE)
endif()
