"""The allocator settings the Produce and Fetch handlers apply once per process."""

import platform

import pytest

from broker import malloc_tuning as allocator


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_takes_every_setting_and_the_handlers_see_it_done():
    assert allocator.keep_freed_buffers() is True
    assert allocator.tuned is True
    assert allocator.keep_freed_buffers() is True  # applying it again is harmless


def test_settings_are_the_documented_mallopt_parameters():
    # <malloc.h>: M_TRIM_THRESHOLD -1, M_TOP_PAD -2, M_MMAP_THRESHOLD -3; a wrong number
    # would be refused (mallopt returns 0) or set something else.
    assert dict(allocator._SETTINGS) == {-1: 16 << 20, -2: 4 << 20, -3: 4 << 20}
