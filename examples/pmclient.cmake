# SPDX-License-Identifier: Apache-2.0
# The C API examples, included from libpmclient/client.cmake and built with
# the project so that they cannot rot:
#  - pm-resolve (examples/resolve.c): blocking resolution, installed;
#  - pm-resolve-poll (examples/resolve_poll.c): resolutions driven by a
#    poll(2) loop (pmc_resolve_start, pmc_fds, pmc_timeout_ms, pmc_process);
#    an example only, not installed.
add_executable(pm-resolve ${CMAKE_CURRENT_LIST_DIR}/resolve.c)
set_target_properties(pm-resolve PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_link_libraries(pm-resolve PRIVATE pmclient)
install(TARGETS pm-resolve RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT pmclient)

add_executable(pm-resolve-poll ${CMAKE_CURRENT_LIST_DIR}/resolve_poll.c)
set_target_properties(pm-resolve-poll PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_link_libraries(pm-resolve-poll PRIVATE pmclient)
