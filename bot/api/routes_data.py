"""Data routes."""

from aiohttp import web

routes = web.RouteTableDef()
