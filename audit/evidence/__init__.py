"""The Django-free half of the audit: the hash chain and its record formats, the decision rule,
the Merkle log's arithmetic and checkpoints, the bundle's layout, writer and descriptive members,
the report and the offline verifier. An examiner runs it with the standard library,
`cryptography` and ReportLab alone; tests/unit/evidence/test_bundle.py holds it to importing no
Django. The Django side (audit/) reads and writes the store and calls in here.
"""
