"""The Django-free half of the audit: the hash chain and its record formats, the decision rule,
the Merkle log's arithmetic and checkpoints, the bundle's layout, writer and descriptive members,
the report and the offline verifier. An examiner runs it with the standard library,
`cryptography` and ReportLab alone; tests/unit/evidence/test_bundle.py holds it to importing no
Django. The Django side (audit/) reads and writes the store and calls in here.
"""

# The release of the examiner's package (scripts/build_verifier_wheel.py, docs/examiner-package.md):
# bundle format, matter format, revision of the verifier that reads them.
VERIFIER_VERSION = "6.3.2"
