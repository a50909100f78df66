from django.db import connection
from django.http import JsonResponse
from django.urls import path
from django.utils import timezone
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


# Every quota row beside what its team holds now through bookings and running jobs outside
# bookings: the quota page's figures as one SQL statement can give them.
BARE_QUOTA_SQL = """
SELECT t.slug, q.gpu_model_id, q.guaranteed, q."limit",
       (SELECT COUNT(*) FROM reservations_reservationgpu h
        JOIN reservations_reservation r ON r.id = h.reservation_id
        WHERE r.team_id = t.id AND h.active AND h.start <= %s AND h."end" > %s)
     + (SELECT COUNT(*) FROM jobs_joballocation a JOIN jobs_job j ON j.id = a.job_id
        WHERE j.team_id = t.id AND a."end" IS NULL AND j.reservation_id IS NULL)
FROM teams_quota q JOIN teams_team t ON t.id = q.team_id ORDER BY t.slug, q.id"""


def bare_quota_view(request):
    """Baseline: the least a Django view can do to list the quota rows and what each team
    holds now: one SQL statement and a JSON reply."""
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(BARE_QUOTA_SQL, [now, now])
        rows = cursor.fetchall()
    return JsonResponse({"rows": rows})


urlpatterns = [
    path("bench/bare-insert/", bare_insert_view),
    path("bench/bare-quotas/", bare_quota_view),
    *portal_urlpatterns,
]
