"""The sharding check's command line and worker entry, apart from the package's imports (run as
`python -m customop._sharding_main`, so it is not already in sys.modules when it starts):

    python -m customop._sharding_main [--op GLOB] [--load LIB]... [--json FILE]
        every declared rule on the op's registered samples (customop-gradcheck --sharding);
        exit 0 every rule held, 3 one failed, 2 no op matched
    python -m customop._sharding_main --worker RANK JOB
        one rank of a check (customop._sharding_check.run_cases starts them)
"""

import sys

from customop import _sharding_check

if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--worker":
        _sharding_check._worker(int(sys.argv[2]), sys.argv[3])
    else:
        sys.exit(_sharding_check.main())
