"""Admin routes (admin keys only)."""

from aiohttp import web

routes = web.RouteTableDef()
