# Project-wide compiler flags: warnings everywhere, -Werror in CI, and the
# sanitizer build of the `asan` preset.
add_compile_options(-Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wpedantic)
if(SDPPM_WERROR)
  add_compile_options(-Werror)
endif()
if(SDPPM_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
