# Interfaces around the core library: xxHash for the .vqkv checksums, the Python module, the C API
# example, install rules and the CMake package config. Included at the end of the top-level
# CMakeLists.txt, so every target defined there exists here.


# Building vq_tests also builds the CLI: the interface tests run it.
if(TARGET vq_tests)
  add_dependencies(vq_tests veloxquant_cli)
endif()

# ------------------------------------------------------------------------------------------------
# Python module `veloxquant` (pybind11 + NumPy from Debian's packages, for /usr/bin/python3).
if(VQ_BUILD_PYTHON)
  if(NOT DEFINED Python_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python_EXECUTABLE /usr/bin/python3)
  endif()
  find_package(Python 3 COMPONENTS Interpreter Development.Module)
  if(Python_FOUND)
    find_package(pybind11 2.6 CONFIG QUIET)
  endif()
  if(NOT Python_FOUND OR NOT pybind11_FOUND)
    message(WARNING "VQ_BUILD_PYTHON is ON but Python 3 development files or pybind11 were not "
      "found (Debian: python3-dev pybind11-dev python3-numpy); the Python module is skipped. "
      "Pass -DVQ_BUILD_PYTHON=OFF to silence this.")
  else()
    pybind11_add_module(veloxquant_python MODULE NO_EXTRAS
      ${CMAKE_SOURCE_DIR}/python/veloxquant_module.cpp)
    set_target_properties(veloxquant_python PROPERTIES OUTPUT_NAME veloxquant
      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/python)
    # src/ for eval/fidelity.hpp (the evaluation the module shares with the CLI)
    target_include_directories(veloxquant_python PRIVATE ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(veloxquant_python PRIVATE veloxquant vq_warnings nlohmann_json::nlohmann_json)
    if(VQ_BUILD_TESTS)
      add_test(NAME python_tests COMMAND ${Python_EXECUTABLE} -m pytest -q -p no:cacheprovider
        ${CMAKE_SOURCE_DIR}/python/tests)
      set_tests_properties(python_tests PROPERTIES ENVIRONMENT
        "VQ_PYTHON_DIR=${CMAKE_BINARY_DIR}/python;VQ_CLI=$<TARGET_FILE:veloxquant_cli>")
    endif()
  endif()
endif()

# ------------------------------------------------------------------------------------------------
# The C API example, built against the in-tree library and run as a test.
add_executable(vq_c_api_example ${CMAKE_SOURCE_DIR}/examples/c_api/example.c)
target_link_libraries(vq_c_api_example PRIVATE veloxquant m)
set_target_properties(vq_c_api_example PROPERTIES LINKER_LANGUAGE CXX C_STANDARD 11)
target_compile_options(vq_c_api_example PRIVATE -Wall -Wextra -Wpedantic
  $<$<BOOL:${VQ_WERROR}>:-Werror>)
if(VQ_BUILD_TESTS)
  add_test(NAME c_api_example COMMAND vq_c_api_example)
  # With the shared model files present, the example also opens, runs and evaluates a model.
  set(_vq_example_model ${CMAKE_SOURCE_DIR}/../shared/models/stories260K.gguf)
  if(EXISTS ${_vq_example_model})
    add_test(NAME c_api_example_model COMMAND vq_c_api_example ${_vq_example_model})
  endif()
endif()

# ------------------------------------------------------------------------------------------------
# Install: headers, the static library with an exported target, the CLI and a package config so
# that find_package(veloxquant) works from the install prefix (scripts/test_install.sh checks it).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS veloxquant EXPORT veloxquantTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS veloxquant_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/veloxquant DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
install(EXPORT veloxquantTargets NAMESPACE veloxquant::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/veloxquant)

# Private link dependencies beyond Eigen / nlohmann_json / zstd that a static library passes on to
# its consumers get a find_dependency line in the config.
set(VQ_CONFIG_EXTRA_DEPENDENCIES "")
get_target_property(_vq_links veloxquant LINK_LIBRARIES)
foreach(_lib IN LISTS _vq_links)
  if(_lib STREQUAL "Threads::Threads")
    string(APPEND VQ_CONFIG_EXTRA_DEPENDENCIES "find_dependency(Threads)\n")
  elseif(_lib MATCHES "^OpenMP::")
    string(APPEND VQ_CONFIG_EXTRA_DEPENDENCIES "find_dependency(OpenMP)\n")
  endif()
endforeach()

# The library is C++ and static, so a consumer linking with the C driver (a pure C project, no
# C++ enabled) needs the C++ runtime on its link line: the libraries the C++ compiler links
# implicitly beyond the C compiler's. The config adds them only when the link language is not C++.
set(VQ_CXX_RUNTIME_LIBS "")
foreach(_lib IN LISTS CMAKE_CXX_IMPLICIT_LINK_LIBRARIES)
  if(NOT _lib IN_LIST CMAKE_C_IMPLICIT_LINK_LIBRARIES AND NOT _lib IN_LIST VQ_CXX_RUNTIME_LIBS)
    list(APPEND VQ_CXX_RUNTIME_LIBS "${_lib}")
  endif()
endforeach()
if(NOT "m" IN_LIST VQ_CXX_RUNTIME_LIBS)
  list(APPEND VQ_CXX_RUNTIME_LIBS m)
endif()
set(VQ_CONFIG_CXX_RUNTIME "")
foreach(_lib IN LISTS VQ_CXX_RUNTIME_LIBS)
  string(APPEND VQ_CONFIG_CXX_RUNTIME "  \"$<$<NOT:$<LINK_LANGUAGE:CXX>>:${_lib}>\"\n")
endforeach()

configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/veloxquantConfig.cmake.in
  ${CMAKE_BINARY_DIR}/cmake/veloxquantConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/veloxquant
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/veloxquantConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/veloxquantConfig.cmake
  ${CMAKE_BINARY_DIR}/cmake/veloxquantConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/veloxquant)

# The Python module, when built, goes to <prefix>/lib/python3.X/dist-packages: with the default
# prefix /usr/local that is on /usr/bin/python3's sys.path on Debian (lib/python3/dist-packages
# is only searched under /usr). Other prefixes: set PYTHONPATH, or VQ_PYTHON_INSTALL_DIR.
if(TARGET veloxquant_python)
  set(VQ_PYTHON_INSTALL_DIR
    "lib/python${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}/dist-packages" CACHE PATH
    "Where `cmake --install` puts the veloxquant Python module (relative to the prefix)")
  install(TARGETS veloxquant_python OPTIONAL LIBRARY DESTINATION ${VQ_PYTHON_INSTALL_DIR})
endif()
# The plot helper of `veloxquant eval --plot`, found by an installed CLI in <prefix>/share/veloxquant.
install(FILES ${CMAKE_SOURCE_DIR}/scripts/plot_eval.py DESTINATION ${CMAKE_INSTALL_DATADIR}/veloxquant)
include(${CMAKE_SOURCE_DIR}/fuzz/fuzz.cmake OPTIONAL)
