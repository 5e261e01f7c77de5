from django.urls import path

from rlweb.experiments import compare_views, run_views, views, worker_views

urlpatterns = [
    path("", views.experiment_list, name="experiment-list"),
    path("experiments/new/", views.experiment_new, name="experiment-new"),
    path("experiments/preset.json", views.experiment_preset, name="experiment-preset"),
    path("experiments/<int:experiment_id>/", views.experiment_detail, name="experiment-detail"),
    path("experiments/<int:experiment_id>/clone/", views.experiment_clone, name="experiment-clone"),
    path("experiments/<int:experiment_id>/delete/", views.experiment_delete, name="experiment-delete"),
    path("experiments/<int:experiment_id>/notes/", views.experiment_notes, name="experiment-notes"),
    path("runs/", views.run_list, name="run-list"),
    path("runs/<int:run_id>/", run_views.run_detail, name="run-detail"),
    path("runs/<int:run_id>/cancel/", views.run_cancel, name="run-cancel"),
    path("runs/<int:run_id>/resume/", views.run_resume, name="run-resume"),
    path("runs/<int:run_id>/notes/", views.run_notes, name="run-notes"),
    path("runs/<int:run_id>/change/", views.run_change, name="run-change"),
    path("runs/<int:run_id>/jobs/", run_views.run_jobs, name="run-jobs"),
    path("runs/<int:run_id>/jobs/cancel/", run_views.run_job_cancel, name="run-job-cancel"),
    path("runs/<int:run_id>/events.json", run_views.run_events, name="run-events"),
    path("runs/<int:run_id>/stream", run_views.run_stream, name="run-stream"),
    path("runs/<int:run_id>/history.json", run_views.run_history, name="run-history"),
    path("runs/<int:run_id>/events.csv", run_views.run_csv, name="run-csv"),
    path("runs/<int:run_id>/q-table.json", run_views.run_q_table, name="run-q-table"),
    path("videos/<int:video_id>/", run_views.video_file, name="video-file"),
    path("workers/", worker_views.worker_list, name="worker-list"),
    path("compare/", compare_views.compare_page, name="compare"),
    path("compare/data.json", compare_views.compare_data, name="compare-data"),
    path("compare/stream", compare_views.compare_stream, name="compare-stream"),
    path("compare/export.csv", compare_views.compare_export, {"file_format": "csv"}, name="compare-export-csv"),
    path("compare/export.json", compare_views.compare_export, {"file_format": "json"}, name="compare-export-json"),
    path("checkpoints/<int:checkpoint_id>/download/", run_views.checkpoint_download, name="checkpoint-download"),
]
