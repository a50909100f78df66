from django.db import connection
from django.http import JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from portal.urls import urlpatterns as portal_urlpatterns


@csrf_exempt
def bare_insert_view(request):
    """Baseline: the least a Django view can do to record a booking: one INSERT."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO bench_bare_insert (payload) VALUES (%s) RETURNING id",
            [request.body.decode()],
        )
        new_id = cursor.fetchone()[0]
    return JsonResponse({"id": new_id}, status=201)


urlpatterns = [path("bench/bare-insert/", bare_insert_view), *portal_urlpatterns]
