# SPDX-License-Identifier: Apache-2.0
# Project-wide compiler flags: warnings everywhere, -Werror in CI, and the
# sanitizer build of the `asan` preset.
add_compile_options(-Wall -Wextra -Wshadow -Wpedantic $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor>)
if(SDPPM_WERROR)
  add_compile_options(-Werror)
endif()
if(SDPPM_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
option(SDPPM_LIBFUZZER "Build fuzz targets with libFuzzer (clang only)" OFF)
if(SDPPM_LIBFUZZER)
  # Coverage instrumentation for every library the fuzz targets link.
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
