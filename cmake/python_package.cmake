# The wheel's contents (scikit-build-core, `pip install .`): the core library, the built-in
# ops and the gradcheck library (with its op for Python) under customop/lib/, next to the Python package (python/customop, copied by
# scikit-build-core), and customop/_build_info.py recording the torch they were built against.
# Installed as COMPONENT python only, which is all pyproject.toml asks for.
foreach(_t customop customop_ops customop_gradcheck customop_gradcheck_ops)
  # $ORIGIN: each other; $ORIGIN/../../torch/lib: torch's libraries in the same site-packages
  # (import torch has loaded them already; this serves tools like ldd).
  set_target_properties(${_t} PROPERTIES INSTALL_RPATH "$ORIGIN;$ORIGIN/../../torch/lib"
                                         INSTALL_RPATH_USE_LINK_PATH OFF)
  install(TARGETS ${_t} LIBRARY DESTINATION customop/lib COMPONENT python)
endforeach()

execute_process(
  COMMAND "${CUSTOMOP_PYTHON}" -c "import torch; print(torch.version.cuda or '')"
  OUTPUT_VARIABLE _customop_torch_cuda OUTPUT_STRIP_TRAILING_WHITESPACE WORKING_DIRECTORY /)
set(CUSTOMOP_BUILD_INFO_TORCH_CUDA "${_customop_torch_cuda}")
configure_file("${PROJECT_SOURCE_DIR}/python/_build_info.py.in"
               "${PROJECT_BINARY_DIR}/python/_build_info.py" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/python/_build_info.py" DESTINATION customop COMPONENT python)
