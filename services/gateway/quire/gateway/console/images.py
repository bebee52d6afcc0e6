"""Page images of a parked job's sources, for the review page.

Drawn by the validator on request (``RenderPage``: pdfium in its sandbox,
from the tenant's sealed blob, in memory) and passed straight through: the
gateway writes nothing to disk, and the answer says ``no-store`` so neither
the browser nor a proxy keeps it.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from quire.gateway.console.pages import SECURITY_HEADERS, Refusal, serve
from quire.gateway.console.reviews import job_name
from quire.gateway.console.sessions import PATH
from quire.gateway.console.staff import CALL_SECONDS, Staff
from quire.reasons import ReasonCode
from quire.validator.v1 import validator_service_pb2 as pb

__all__ = ["router", "VARIANTS"]

router = APIRouter(include_in_schema=False)
VARIANTS = {
    "original": pb.PAGE_VARIANT_ORIGINAL,
    "rewrite": pb.PAGE_VARIANT_REWRITE,
}
DEFAULT_WIDTH = 640


@router.get(f"{PATH}/jobs/{{job}}/sources/{{position}}/pages/{{number}}.png")
async def page_image(request: Request, job: str, position: int, number: int) -> Response:
    async def page(request: Request, staff: Staff) -> Response:
        variant = VARIANTS.get(request.query_params.get("variant", "original"))
        width = request.query_params.get("width", str(DEFAULT_WIDTH))
        if variant is None or not width.isdigit() or len(width) > 5:
            raise Refusal(400, ReasonCode.INVALID_REQUEST, "variant original or rewrite, a width")
        drawn = await staff.validator.RenderPage(
            pb.RenderPageRequest(
                job=job_name(job), position=position, variant=variant, page=number, width=int(width)
            ),
            metadata=staff.metadata,
            timeout=CALL_SECONDS,
        )
        return Response(drawn.png, media_type="image/png", headers=dict(SECURITY_HEADERS))

    return await serve(request, page)
