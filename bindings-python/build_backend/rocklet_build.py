"""The PEP 517 backend of rocklet's sdist: maturin's, after a check that Rust is there.

`pip install rocklet-<version>.tar.gz` (or a platform with no prebuilt wheel) builds the
extension from source with cargo. maturin's own backend, finding no cargo, would download a
Rust toolchain into a temporary directory; this one stops instead, naming what it needs, so
a source build never fetches a compiler behind the user's back.
"""

import os
import shutil

from maturin import *  # noqa: F401,F403 (every hook maturin has, wrapped below where it builds)
import maturin as _maturin

MIN_RUST = "1.89"

NEEDS_RUST = f"""
rocklet: building from source needs Rust, and `cargo` is not on PATH.
  Needed: cargo and rustc {MIN_RUST} or later, and a C linker (cc: Debian/Ubuntu
  `apt-get install build-essential`, RHEL/Fedora `dnf install gcc`, Alpine `apk add build-base`).
  Install Rust with rustup (https://rustup.rs), open a new shell (or `. "$HOME/.cargo/env"`)
  and run pip again. Nothing here downloads a toolchain for you.
  Prebuilt wheels need no Rust: CPython >= 3.9 on Linux x86_64 and aarch64 with glibc >= 2.17.
"""


def _check_rust():
    # maturin's backend reads this: never install Rust on its own.
    os.environ["MATURIN_NO_INSTALL_RUST"] = "1"
    if shutil.which("cargo") is None:
        raise SystemExit(NEEDS_RUST)


def get_requires_for_build_wheel(config_settings=None):
    _check_rust()
    return _maturin.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings=None):
    _check_rust()
    return _maturin.get_requires_for_build_editable(config_settings)


def get_requires_for_build_sdist(config_settings=None):
    _check_rust()
    return _maturin.get_requires_for_build_sdist(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _check_rust()
    return _maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _check_rust()
    return _maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _check_rust()
    return _maturin.build_editable(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):
    _check_rust()
    return _maturin.build_sdist(sdist_directory, config_settings)
