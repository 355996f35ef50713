# customop_warnings: the warning set every project target uses.
add_library(customop_warnings INTERFACE)
target_compile_options(customop_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${CUSTOMOP_WARNINGS_AS_ERRORS}>>:-Werror>)
if(CUSTOMOP_SANITIZE)
  # NB: GCC 12 cannot constant-evaluate pointer comparisons into class-type template
  # arguments (static_schema.h's string_view::find on a FixedString) while the null-check
  # family of UBSan is on ("... is not a constant expression"); null dereferences are still
  # caught, as SEGVs, by ASan.
  # NB: -fno-sanitize=vptr: UBSan's vptr check needs the typeinfo of every polymorphic class
  # it sees, and libtorch does not export some (c10::DynamicType): links fail without it.
  add_compile_options(-fsanitize=address,undefined -fno-sanitize=vptr -fno-omit-frame-pointer -fno-sanitize-recover=undefined
                      $<$<COMPILE_LANG_AND_ID:CXX,GNU>:-fno-sanitize=null,nonnull-attribute,returns-nonnull-attribute>)
  add_link_options(-fsanitize=address,undefined -fno-sanitize=vptr)
endif()
if(CUSTOMOP_TSAN)
  # ThreadSanitizer (preset tsan): every customop target; libtorch is not instrumented, so
  # its own synchronisation is invisible to TSan (ci/tsan.supp names what that explains).
  if(CUSTOMOP_SANITIZE)
    message(FATAL_ERROR "customop: CUSTOMOP_TSAN and CUSTOMOP_SANITIZE (ASan) cannot be combined")
  endif()
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
endif()
