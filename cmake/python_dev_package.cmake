# The Python package in the build tree, for the ctest Python tests that import `customop`:
# ${CUSTOMOP_PYTHON_DEV_DIR}/customop holds copies of python/customop's files (refreshed at
# every build), lib/ links to the built libraries (as the wheel's customop/lib), and
# _build_info.py. Tests put
# CUSTOMOP_PYTHON_DEV_DIR on PYTHONPATH. A file added to python/customop shows up at the next
# configure (CONFIGURE_DEPENDS).
set(CUSTOMOP_PYTHON_DEV_DIR "${PROJECT_BINARY_DIR}/python_dev")
set(_pkg "${CUSTOMOP_PYTHON_DEV_DIR}/customop")
file(MAKE_DIRECTORY "${_pkg}/lib")
file(GLOB _customop_py CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/python/customop/*.py"
     "${PROJECT_SOURCE_DIR}/python/customop/*.pyi" "${PROJECT_SOURCE_DIR}/python/customop/py.typed")
execute_process(
  COMMAND "${CUSTOMOP_PYTHON}" -c "import torch; print(torch.version.cuda or '')"
  OUTPUT_VARIABLE CUSTOMOP_BUILD_INFO_TORCH_CUDA OUTPUT_STRIP_TRAILING_WHITESPACE
  WORKING_DIRECTORY /)
configure_file("${PROJECT_SOURCE_DIR}/python/_build_info.py.in" "${_pkg}/_build_info.py" @ONLY)
# Copies, not links: the package finds lib/ next to its own files (__file__, resolved).
set(_links COMMAND "${CMAKE_COMMAND}" -E copy_if_different ${_customop_py} "${_pkg}/")
foreach(_t customop customop_ops customop_gradcheck customop_gradcheck_ops)
  list(APPEND _links COMMAND "${CMAKE_COMMAND}" -E create_symlink "$<TARGET_FILE:${_t}>"
       "${_pkg}/lib/$<TARGET_FILE_NAME:${_t}>")
endforeach()
add_custom_target(customop_python_dev ALL ${_links}
                  DEPENDS customop customop_ops customop_gradcheck customop_gradcheck_ops
                  COMMENT "Linking the built libraries into ${_pkg}/lib")
