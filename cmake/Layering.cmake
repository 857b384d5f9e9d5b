# SPDX-License-Identifier: Apache-2.0
# sdppm_export_headers(TARGET VISIBILITY DIR)
#
# Each library exports its own headers and nothing else of the tree, so a
# layer that includes a header of a library it does not link fails to build
# (a sans-I/O core cannot reach an I/O header). The headers of the source
# folder DIR (relative to the project root) are exposed under their
# root-relative path: for DIR sdp/engine, #include "sdp/engine/connection.hpp".
# A per-target folder in the build tree holds a link DIR -> the source folder,
# and that folder is TARGET's include directory with VISIBILITY (PUBLIC,
# INTERFACE or PRIVATE).
function(sdppm_export_headers target visibility dir)
  if(NOT IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${dir})
    message(FATAL_ERROR "sdppm_export_headers(${target}): no folder ${dir}")
  endif()
  set(root ${PROJECT_BINARY_DIR}/exports/${target})
  set(link ${root}/${dir})
  get_filename_component(parent ${link} DIRECTORY)
  file(MAKE_DIRECTORY ${parent})
  if(IS_SYMLINK ${link})
    file(READ_SYMLINK ${link} current)
    if(NOT current STREQUAL ${PROJECT_SOURCE_DIR}/${dir})
      file(REMOVE ${link})
    endif()
  endif()
  if(NOT IS_SYMLINK ${link})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${dir} ${link} SYMBOLIC)
  endif()
  target_include_directories(${target} ${visibility} $<BUILD_INTERFACE:${root}>)
endfunction()
