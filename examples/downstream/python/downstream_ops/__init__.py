"""downstream_ops: loads libdownstream_ops.so (downstream::smooth_abs) through customop, which
refuses a library built against another torch with both versions named."""

import pathlib

import customop

LIBRARY = pathlib.Path(__file__).resolve().parent / "lib" / "libdownstream_ops.so"
customop.load_library(LIBRARY)
