"""The "Log from your own script" page and the client it offers: the page gives this site's address and the
archive's, and the archive, fetched without a session as pip does, builds into the client's wheel."""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import zipfile

from django.test import Client
from django.urls import reverse

from tests.web.test_tensorboard_import import CLIENT

if str(CLIENT) not in sys.path:  # the client in client/, installed or not
    sys.path.insert(0, str(CLIENT))
from rlweb_client.run import VERSION  # noqa: E402


def test_the_guide_gives_this_sites_address_and_the_clients_install_command(owner_client):
    page = owner_client.get(reverse("log-guide"))
    assert page.status_code == 200
    text = page.content.decode()
    assert "export RLWEB_URL=http://testserver/" in text
    digest = hashlib.sha256(Client().get(reverse("client-archive")).content).hexdigest()  # pip's cache key
    assert f'pip install "rlweb-client @ http://testserver/runs/rlweb-client.zip#sha256={digest}"' in text
    assert 'href="/account/tokens/"' in text and "RlwebCallback" in text and "watch-tensorboard" in text
    assert "<title>Log from a script · rlweb</title>" in text and text.count('id="drive-from-code"') == 1
    assert 'id="log-guide-link"' in owner_client.get(reverse("experiment-list")).content.decode()
    assert Client().get(reverse("log-guide")).status_code == 302  # the guide itself is for signed-in users


def test_the_client_archive_is_public_and_builds_into_the_clients_wheel(tmp_path):
    response = Client().get(reverse("client-archive"))
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    version = VERSION  # the client's own, which its pyproject.toml gives too (so pip does not reuse an older build)
    assert response["Content-Disposition"] == f'attachment; filename="rlweb-client-{version}.zip"'
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    names = set(archive.namelist())
    top = f"rlweb-client-{version}"
    expected = {f"{top}/rlweb_client/{path.name}" for path in (CLIENT / "rlweb_client").glob("*.py")}
    assert expected <= names and f"{top}/pyproject.toml" in names
    assert archive.read(f"{top}/rlweb_client/run.py") == (CLIENT / "rlweb_client" / "run.py").read_bytes()
    (tmp_path / "rlweb-client.zip").write_bytes(response.content)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-w", str(tmp_path / "wheels"), str(tmp_path / "rlweb-client.zip")],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = (tmp_path / "wheels").glob(f"rlweb_client-{version}-*.whl")
    assert "rlweb_client/sb3.py" in zipfile.ZipFile(wheel).namelist()
