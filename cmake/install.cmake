# Installed package: find_package(customop) gives customop::customop (and customop::gradcheck).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
