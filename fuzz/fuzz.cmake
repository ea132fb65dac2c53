# Fuzz targets (see docs/reliability.md). Included at the end of cmake/Extras.cmake.
#
# Every fuzz/fuzz_<name>.cpp defines LLVMFuzzerTestOneInput and is built twice:
#   vq_replay_<name>  always (with the tests): a plain main() (fuzz/replay_main.cpp) that runs every
#                     file of fuzz/corpus/<name>/ through the target; registered with CTest.
#   vq_fuzz_<name>    only with -DVQ_BUILD_FUZZ=ON and clang: the libFuzzer binary
#                     (-fsanitize=fuzzer; add -DVQ_SANITIZE=ON for ASan + UBSan).
# With VQ_BUILD_FUZZ the library itself is compiled with -fsanitize=fuzzer-no-link so that libFuzzer
# sees coverage inside the parsers and decoders, not only in the target files.

file(GLOB VQ_FUZZ_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/fuzz/fuzz_*.cpp)

set(_vq_fuzz_engine OFF)
if(VQ_BUILD_FUZZ)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    set(_vq_fuzz_engine ON)
    target_compile_options(veloxquant PRIVATE -fsanitize=fuzzer-no-link)
  else()
    message(WARNING "VQ_BUILD_FUZZ needs clang (found ${CMAKE_CXX_COMPILER_ID}): "
                    "only the corpus replay drivers are built")
  endif()
endif()

if(VQ_BUILD_TESTS AND VQ_FUZZ_SOURCES)
  # The replay main() is compiled once and linked into every replay driver.
  add_library(vq_replay_main OBJECT ${CMAKE_SOURCE_DIR}/fuzz/replay_main.cpp)
  target_link_libraries(vq_replay_main PRIVATE vq_warnings vq_flags)
endif()

foreach(src ${VQ_FUZZ_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  string(REGEX REPLACE "^fuzz_" "" short ${name})
  if(VQ_BUILD_TESTS)
    add_executable(vq_replay_${short} ${src} $<TARGET_OBJECTS:vq_replay_main>)
    target_include_directories(vq_replay_${short} PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/fuzz)
    target_link_libraries(vq_replay_${short} PRIVATE veloxquant vq_warnings vq_flags)
    add_test(NAME fuzz_replay_${short}
      COMMAND vq_replay_${short} ${CMAKE_SOURCE_DIR}/fuzz/corpus/${short})
  endif()
  if(_vq_fuzz_engine)
    add_executable(vq_fuzz_${short} ${src})
    target_include_directories(vq_fuzz_${short} PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/fuzz)
    target_compile_options(vq_fuzz_${short} PRIVATE -fsanitize=fuzzer)
    target_link_options(vq_fuzz_${short} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(vq_fuzz_${short} PRIVATE veloxquant vq_warnings vq_flags)
    list(APPEND VQ_FUZZ_TARGETS vq_fuzz_${short})
  endif()
endforeach()
if(_vq_fuzz_engine AND VQ_FUZZ_TARGETS)
  add_custom_target(vq_fuzz_all DEPENDS ${VQ_FUZZ_TARGETS})
endif()

# The long-run stress program (bench/stress/stress.cpp): a benchmark, not a test; built on request
# (`ninja vq_stress`), never by default.
if(EXISTS ${CMAKE_SOURCE_DIR}/bench/stress/stress.cpp)
  add_executable(vq_stress EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/bench/stress/stress.cpp)
  target_include_directories(vq_stress PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(vq_stress PRIVATE veloxquant vq_warnings vq_flags)
endif()

# The seed-corpus generator (fuzz/make_corpus.cpp): `ninja vq_make_corpus`, then run
# `vq_make_corpus fuzz/corpus` from the repository root. Not built by default.
add_executable(vq_make_corpus EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/fuzz/make_corpus.cpp)
target_include_directories(vq_make_corpus PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(vq_make_corpus PRIVATE veloxquant vq_warnings vq_flags)
