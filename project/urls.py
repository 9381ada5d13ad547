from django.contrib import admin
from django.urls import include, path

from reports.login_throttle import ThrottledLoginView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("reports.urls")),
]

# Under /api/ a path nothing serves, or an error no view caught, answers JSON, as the
# API's other errors do.
handler404 = "reports.serving.errors.not_found"
handler500 = "reports.serving.errors.internal_error"
