from django.conf import settings


def site(request):
    return {"allow_signup": settings.ALLOW_SIGNUP}
