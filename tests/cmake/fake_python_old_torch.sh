#!/bin/sh
# Stands in for a python whose torch is 2.10.0 (outside the supported range): prints what
# cmake/torch.cmake asks python for (torch folder; version; C++11 ABI).
echo "/nonexistent/torch;2.10.0+cpu;1"
