# pm-resolve: the C API example (examples/resolve.c), included from
# libpmclient/client.cmake.
add_executable(pm-resolve ${CMAKE_CURRENT_LIST_DIR}/resolve.c)
set_target_properties(pm-resolve PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_link_libraries(pm-resolve PRIVATE pmclient)
install(TARGETS pm-resolve RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT pmclient)
