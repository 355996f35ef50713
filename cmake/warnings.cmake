# customop_warnings: the warning set every project target uses.
add_library(customop_warnings INTERFACE)
target_compile_options(customop_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${CUSTOMOP_WARNINGS_AS_ERRORS}>>:-Werror>)
if(CUSTOMOP_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
