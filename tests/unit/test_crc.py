"""protocol.crc: the crc32c package's C function, loaded without the package's __init__
(which reads its own version through importlib.metadata)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import crc32c

CHECK = "import sys\nfrom protocol import crc\nprint(hex(crc.crc32c(b'123456789')), 'importlib.metadata' in sys.modules)"


def test_crc32c_is_the_packages_and_loads_without_importlib_metadata():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout.split()
    assert out == [hex(0xE3069283), "False"]  # the CRC-32C check value of "123456789"


def test_crc32c_in_a_process_that_imported_the_package():
    from protocol import crc

    data = bytes(range(256)) * 40
    assert crc.crc32c(data) == crc32c.crc32c(data)
    assert crc.crc32c(memoryview(data)[3:]) == crc32c.crc32c(data[3:])
