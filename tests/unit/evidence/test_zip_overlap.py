"""The outside check's zip that killed offline_verify (issue 41): a few MB whose central
directory names one member's bytes 20,000 times, which the verifier read 20,000 times over
(20 GB resident, then the OOM killer). It is refused from the directory alone, in seconds."""

import io
import resource
import struct
import time
import zipfile

from audit.evidence.offline_verify import verify_bundle

ENTRIES = 20_000
MEMBER = 256 * 1024


def overlapping_zip() -> bytes:
    """One stored member, then a central directory of ENTRIES entries all pointing at it."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("records.jsonl", b"x" * MEMBER)
    data = out.getvalue()
    eocd = data.rindex(b"PK\x05\x06")
    size, offset = struct.unpack("<II", data[eocd + 12 : eocd + 20])
    entry = data[offset : offset + size]
    directory = entry * ENTRIES
    end = struct.pack(
        "<4sHHHHIIH", b"PK\x05\x06", 0, 0, ENTRIES, ENTRIES, len(directory), offset, 0
    )
    return data[:offset] + directory + end


def test_a_central_directory_that_names_one_member_many_times_is_refused_unread():
    data = overlapping_zip()
    assert len(data) < 2 * 1024 * 1024  # under 2 MB claiming about 5 GB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    failures = verify_bundle(data, keys=[])
    assert time.monotonic() - started < 10
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 512 * 1024  # under 512 MiB more than before, whatever it read
    assert len(failures) == 1 and "members declare" in failures[0] and "overlap" in failures[0]
