"""`python -m audit.offline_verify BUNDLE --key K ...`: the examiner's command, under the name
outside tools call. The verifier itself is audit.evidence.offline_verify (Django-free)."""

import sys

from audit.evidence.offline_verify import main

if __name__ == "__main__":
    sys.exit(main())
