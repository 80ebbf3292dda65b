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


def test_a_server_that_drops_the_first_answers_is_asked_again(tmp_path, monkeypatch):
    """A busy mirror's 503s (and a lookup or connect that fails) are retried with backoff; past the retries the
    failure reaches the task boundary, which names the URL in one line."""
    import hashlib

    from loopback import Handler, serving

    body = b"the wheel's bytes"
    asked = []

    class Busy(Handler):
        def do_GET(self):
            asked.append(self.path)
            if self.path == "/always/x.whl" or len(asked) <= 2:
                self.reply(503, {"detail": "busy"})
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    monkeypatch.setattr(download, "BACKOFF_S", 0.01)  # the test need not wait the backoff
    with serving(Busy) as url:
        got = download.fetch(f"{url}/pkg/x.whl", hashlib.sha256(body).hexdigest(), dest=tmp_path)
        assert got.read_bytes() == body and asked == ["/pkg/x.whl"] * 3, asked
        import requests

        with pytest.raises(requests.HTTPError, match="503"):
            download.fetch(f"{url}/always/x.whl", "0" * 64, dest=tmp_path / "other")
    assert not list((tmp_path / "other").iterdir()), "nothing half-written"
