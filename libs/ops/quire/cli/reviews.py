"""``quire review list|approve|reject``: operators and reviewers decide parked
jobs; the ledger records the token each decision was made with."""

from __future__ import annotations

import argparse

from quire.cli.args import job_resource, operator_metadata
from quire.cli.config import ClientConfig
from quire.cli.output import Output, message_dict
from quire.client import new_request_id
from quire.tls import aio_channel
from quire.validator.v1 import validator_service_pb2 as pb
from quire.validator.v1 import validator_service_pb2_grpc as pb_grpc

__all__ = ["review_list", "review_approve", "review_reject"]


async def review_list(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    reviews: list[pb.Review] = []
    token = ""
    async with aio_channel(config.validator, config.tls) as channel:
        stub = pb_grpc.ValidatorServiceStub(channel)
        while True:  # every page, printed as it arrives
            reply = await stub.ListReviews(
                pb.ListReviewsRequest(page_token=token), metadata=operator_metadata(config)
            )
            for review in reply.reviews:
                asks = [d.rule for d in review.decisions if d.outcome == "review"]
                out.line(f"{review.job}  {review.ruleset_version}  needs: {', '.join(asks)}")
            reviews.extend(reply.reviews)
            token = reply.next_page_token
            if not token:
                break
    if not reviews:
        out.line("no jobs waiting for review")
    out.result({"reviews": [message_dict(review) for review in reviews]})
    return 0


async def _resolve(
    args: argparse.Namespace, config: ClientConfig, out: Output, approve: bool
) -> int:
    request = pb.ResolveReviewRequest(
        job=job_resource(args.job),
        approve=approve,
        note=args.note,
        request_id=args.request_id or new_request_id(),
    )
    async with aio_channel(config.validator, config.tls) as channel:
        review = await pb_grpc.ValidatorServiceStub(channel).ResolveReview(
            request, metadata=operator_metadata(config)
        )
    out.line(f"{review.job}  {review.status}  by {review.operator}")
    out.result({"review": message_dict(review)})
    return 0


async def review_approve(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    return await _resolve(args, config, out, approve=True)


async def review_reject(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    return await _resolve(args, config, out, approve=False)
