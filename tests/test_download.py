"""A download never leaves its directory: the file name a URL gives is one plain name, and the target is no link.

A lock that names ``…/x/..%2F..%2Fdir%2Ffile`` once made ``invoke lock --check`` delete a file outside the cache
(the old copy's hash did not match) and plant the download there. These run ``download.fetch`` itself, with the
files it could reach put where they would be, and check that each is untouched.
"""

from __future__ import annotations

import pytest

from sglang_stack import download
from sglang_stack.errors import UserError

SHA = "0" * 64


@pytest.mark.parametrize("tail", ["x/..%2F..%2Fvictim.whl", "..%2Fvictim.whl", "a%2Fb.whl", "a%5Cb.whl", "a%00b.whl",
                                  "..", ".hidden.whl", "%2E%2E", "a%0Ab.whl"])
def test_a_url_whose_name_is_not_one_plain_file_is_refused_before_anything_is_touched(tmp_path, tail):
    cache = tmp_path / "cache" / "downloads"
    cache.mkdir(parents=True)
    victim = tmp_path / "victim.whl"
    victim.write_text("mine")
    with pytest.raises(UserError, match="is not one plain file name"):
        download.fetch(f"https://files.example/packages/{tail}", SHA, dest=cache)
    assert victim.read_text() == "mine", "a file outside the download directory changed"
    assert not any(cache.iterdir()), "something was written"


def test_a_link_in_the_download_directory_is_not_followed(tmp_path):
    cache = tmp_path / "downloads"
    cache.mkdir()
    victim = tmp_path / "victim.whl"
    victim.write_text("mine")
    (cache / "pkg-1.0-py3-none-any.whl").symlink_to(victim)
    with pytest.raises(UserError, match="a link, or outside"):
        download.fetch("https://files.example/packages/pkg-1.0-py3-none-any.whl", SHA, dest=cache)
    assert victim.read_text() == "mine" and (cache / "pkg-1.0-py3-none-any.whl").is_symlink()


def test_a_plain_name_is_kept_as_it_is():
    assert download.filename_of("https://download.pytorch.org/whl/cu130/pkg-1.2.3%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl") \
        == "pkg-1.2.3+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
