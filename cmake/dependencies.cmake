# Every third-party dependency, all from Debian packages (scripts/install-deps.sh).
# No FetchContent, no downloads at build or test time.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HWY REQUIRED IMPORTED_TARGET libhwy)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
find_package(Eigen3 REQUIRED NO_MODULE)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json REQUIRED)
if(KVPACK_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(KVPACK_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
