"""The page that imports a TensorBoard log folder as finished logged runs, one per folder of event files
(rlweb/logged/tensorboard.py); the API and `python -m rlweb_client import-tensorboard` do the same from code."""

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
