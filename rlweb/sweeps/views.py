"""Sweep pages (being built)."""
from django.http import HttpResponse


def _todo(request, sweep_id=None):
    return HttpResponse("not yet", status=404)


sweep_list = sweep_new = sweep_detail = sweep_data = sweep_figures = _todo
sweep_cancel = sweep_extend = sweep_launch_best = _todo
