# SPDX-License-Identifier: Apache-2.0
# libpmclient proper: the sans-I/O client core (static, for the library and
# its unit tests), the shared library pmclient (C++ Resolver + C API), the
# pm-resolve example, install rules, pkg-config and CMake package files.

# Public and internal headers: include/pmclient/ holds exactly the installed
# API (see the install rule below); the internal headers (the transaction
# machine, the cache, the PMSP configuration, the I/O helpers) live in src/
# next to their sources. Only pmclient_core exports src/ as an include
# directory, for libpmclient itself and for the tests and benchmarks that
# test internals (they link pmclient_core explicitly); the shared library
# pmclient links it PRIVATE, so src/ never reaches its users.

# --- sans-I/O core: transaction machine, PmTime cache, PMSP configuration ---
# Internal: never installed.
add_library(pmclient_core STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/src/types.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/cache.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/machine.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/pmsp_config.cpp)
sdppm_export_headers(pmclient_core PUBLIC libpmclient/src)
target_link_libraries(pmclient_core PUBLIC pmclient_wire PRIVATE yaml-cpp)
set_target_properties(pmclient_core PROPERTIES
  POSITION_INDEPENDENT_CODE ON
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON)
add_library(pmclient::core ALIAS pmclient_core)

# --- the connect-and-fall-back procedure of 7.5.1 (sans-I/O, not installed):
# one copy, driven by pmclient::connect and by sdp_api's stream front ends ---
add_library(pmclient_connect_core STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/src/connect_core/connect_procedure.cpp)
sdppm_export_headers(pmclient_connect_core PUBLIC libpmclient/src/connect_core)
target_link_libraries(pmclient_connect_core PUBLIC pmclient_wire)
# Its blocking driver (sockets: a separate target, so the core stays pure).
add_library(pmclient_connect_blocking STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/src/connect_core/blocking_connect.cpp)
target_link_libraries(pmclient_connect_blocking PUBLIC pmclient_connect_core)
set_target_properties(pmclient_connect_core pmclient_connect_blocking PROPERTIES
  POSITION_INDEPENDENT_CODE ON
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON)

# --- the shared library -------------------------------------------------------
add_library(pmclient SHARED
  ${CMAKE_CURRENT_SOURCE_DIR}/src/resolver.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/connect.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/c_api.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/loop_driver.cpp)
target_include_directories(pmclient PUBLIC
  $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(pmclient PUBLIC cxx_std_20)
target_compile_definitions(pmclient PRIVATE PMCLIENT_VERSION="${PROJECT_VERSION}")
target_link_libraries(pmclient
  PUBLIC Boost::headers Threads::Threads
  PRIVATE pmclient_core pmclient_connect_blocking pmclient_wire)
# The library's ABI version, independent of the project version: bump the
# major (and SOVERSION) only on an incompatible change of the C ABI.
set(PMCLIENT_ABI_VERSION 1.0.0)
set_target_properties(pmclient PROPERTIES
  VERSION ${PMCLIENT_ABI_VERSION}
  SOVERSION 1
  C_VISIBILITY_PRESET hidden
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON
  EXPORT_NAME pmclient)
add_library(pmclient::pmclient ALIAS pmclient)

# --- install: library, headers, CMake package, pkg-config ---------------------
include(CMakePackageConfigHelpers)
# Every header of include/pmclient/ is public and installed; nothing else is
# (tests/integration/pmclient checks that each compiles on its own from the
# installed tree).
install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/include/pmclient
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT pmclient-dev
  FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
install(TARGETS pmclient EXPORT pmclientTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT pmclient NAMELINK_COMPONENT pmclient-dev)
set(PMCLIENT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/pmclient)
install(EXPORT pmclientTargets NAMESPACE pmclient:: DESTINATION ${PMCLIENT_CMAKE_DIR}
  COMPONENT pmclient-dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/pmclientConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/pmclientConfig.cmake
  INSTALL_DESTINATION ${PMCLIENT_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/pmclientConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pmclientConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/pmclientConfigVersion.cmake
  DESTINATION ${PMCLIENT_CMAKE_DIR} COMPONENT pmclient-dev)
# pmclient.pc is relocatable: prefix is found relative to the .pc file.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(PMCLIENT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _pc_rel "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
  string(REGEX REPLACE "/$" "" _pc_rel "${_pc_rel}")
  set(PMCLIENT_PC_PREFIX "\${pcfiledir}/${_pc_rel}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/pmclient.pc.in
  ${CMAKE_CURRENT_BINARY_DIR}/pmclient.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pmclient.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT pmclient-dev)

# --- example program and benchmark --------------------------------------------
include(${PROJECT_SOURCE_DIR}/examples/pmclient.cmake)
# Google Benchmark is a test dependency (scripts/deps.sh --test).
find_package(benchmark QUIET)
if(benchmark_FOUND)
  add_subdirectory(${PROJECT_SOURCE_DIR}/bench/pmclient ${CMAKE_BINARY_DIR}/bench/pmclient)
else()
  message(STATUS "pmclient-bench: Google Benchmark not found, not built (scripts/deps.sh --test)")
endif()
