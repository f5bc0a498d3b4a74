"""Makes the test workers' class archive (``harness.TEST_CLASS_ARCHIVE_DIR``) unless it is there already.

``deploy/test.sh`` runs this in the background beside its checks and the fast tier: made by the slow tiers'
first Spark test instead, it held all three pytest processes at their start for as long as it took (~60–90 s
on 2 cores, on a fresh clone), one making it and the others waiting for it. Another process making it at the
same time is waited for (the archive's lock), and nothing here is needed for the tests to pass: without an
archive they make it themselves, or start their JVMs without one.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import TEST_CLASS_ARCHIVE, TEST_CLASS_ARCHIVE_DIR, TEST_DRIVER_CONF, shared_class_archive  # noqa: E402


def main() -> int:
    if TEST_CLASS_ARCHIVE != str(TEST_CLASS_ARCHIVE_DIR):
        print("test class archive: off (TEST_CLASS_ARCHIVE=off)")
        return 0
    path = shared_class_archive(TEST_DRIVER_CONF)
    print(f"test class archive: {path}" if path else "test class archive: none could be made (JVMs start without)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
