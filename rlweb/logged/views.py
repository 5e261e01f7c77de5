"""The page that imports a TensorBoard log folder as a finished logged run (rlweb/logged/tensorboard.py); the
API and `python -m rlweb_client import-tensorboard` do the same from code."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render

from rlweb.logged import tensorboard
from rlweb.logged.forms import TensorBoardImportForm
from rlweb.logged.runs import Refused


def import_tensorboard(request):
    form = TensorBoardImportForm(request.POST or None, request.FILES or None)
    status = 200
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            run = tensorboard.import_archive(request.user, data["experiment"], data["archive"], name=data["name"])
        except Refused as error:
            form.add_error("archive", error.detail)
            status = error.status
        else:
            messages.success(request, f"Imported: {run.steps_done:,} steps of TensorBoard scalars.")
            return redirect(run)
    elif request.method == "POST":
        status = 400
    return render(request, "logged/import_tensorboard.html",
                  {"form": form, "max_mb": tensorboard.max_bytes() // 2**20}, status=status)
