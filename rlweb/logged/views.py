"""The pages for runs logged from outside: how to log from a script (with the client to download), and the import of
a TensorBoard log folder as finished logged runs, one per folder of event files (rlweb/logged/tensorboard.py); the
API and `python -m rlweb_client import-tensorboard` do the same from code."""

from __future__ import annotations

import functools
import hashlib
import io
import tomllib
import zipfile

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from rlweb.logged import tensorboard
from rlweb.logged.forms import TensorBoardImportForm
from rlweb.logged.runs import Refused


def import_tensorboard(request):
    form = TensorBoardImportForm(request.POST or None, request.FILES or None)
    status = 200
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            made = tensorboard.import_archive(request.user, data["experiment"], data["archive"], name=data["name"])
        except Refused as error:
            form.add_error("archive", error.detail)
            status = error.status
        else:
            if len(made) == 1:
                messages.success(request, f"Imported: {made[0].steps_done:,} steps of TensorBoard scalars.")
                return redirect(made[0])
            messages.success(request, f"Imported {len(made)} runs, one per folder of event files: "
                                      f"{', '.join(run.logged.name for run in made)}.")
            return redirect(made[0].experiment)
    elif request.method == "POST":
        status = 400
    return render(request, "logged/import_tensorboard.html",
                  {"form": form, "max_mb": tensorboard.max_bytes() // 2**20}, status=status)


CLIENT = settings.BASE_DIR / "client"


@functools.cache
def client_version() -> str:
    return tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]["version"]


def log_guide(request):
    """How to log runs from a script, an SB3 model or a TensorBoard folder, with this site's address filled in. The
    client's address carries its archive's digest: pip keys the wheels it builds from a URL by it, and would
    otherwise install the build of an older client it kept."""
    return render(request, "logged/log_guide.html", {
        "site": request.build_absolute_uri("/"),
        "archive_url": request.build_absolute_uri(reverse("client-archive")) + f"#sha256={client_digest()}"})


@functools.cache
def client_zip() -> bytes:
    """client/ as a source archive pip installs (`pip install URL`): its pyproject.toml, README and package, under
    one top folder. Made once per process from the files the site runs with, so it matches the server; the same
    files make the same bytes (fixed dates), on every host."""
    top = f"rlweb-client-{client_version()}"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted([CLIENT / "pyproject.toml", CLIENT / "README.md", *(CLIENT / "rlweb_client").glob("*.py")]):
            member = zipfile.ZipInfo(f"{top}/{path.relative_to(CLIENT).as_posix()}", date_time=(2020, 1, 1, 0, 0, 0))
            member.external_attr = 0o644 << 16
            archive.writestr(member, path.read_bytes(), compress_type=zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


@functools.cache
def client_digest() -> str:
    return hashlib.sha256(client_zip()).hexdigest()


@login_not_required  # the client's source, no one's data: pip fetches it without a session
@require_GET
def client_archive(request):
    response = HttpResponse(client_zip(), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="rlweb-client-{client_version()}.zip"'
    return response
