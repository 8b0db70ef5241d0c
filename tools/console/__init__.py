"""The live web console (`ferry console`): view model, cluster source, aiohttp app, static page."""
