"""An example of your own tools in the container: deploy/catalog/Dockerfile builds an image
that serves this catalog (docs/deployment.md, "Your tools in the container").
deploy/compose.yaml and deploy/k8s/ run that image, and deploy/image-smoke.sh builds it and
calls ``utc_offset``.

Its one dependency outside the server, ``tzdata`` (time zones where the system has none), is
in requirements.txt beside it, which the recipe installs.
"""

from datetime import datetime
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, Field

from server import Catalog, ToolError

catalog = Catalog("example-tools", "1.0.0", instructions="Time zone lookups.")


class Offset(BaseModel):
    zone: str
    utc_offset: str


@catalog.tool(annotations={"readOnlyHint": True})
def utc_offset(
    zone: Annotated[str, Field(description="An IANA time zone, such as Asia/Kolkata")],
) -> Offset:
    """The time zone's offset from UTC, now."""
    try:
        now = datetime.now(ZoneInfo(zone))
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise ToolError(f"Unknown time zone {zone!r}.") from error
    offset = now.strftime("%z")  # +0530
    return Offset(zone=zone, utc_offset=f"{offset[:3]}:{offset[3:]}")
