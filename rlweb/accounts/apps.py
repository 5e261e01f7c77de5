from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "rlweb.accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from rlweb.accounts import throttle  # noqa: F401  (connects the failed-login receiver)
