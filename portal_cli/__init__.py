"""`gpu-portal`: the portal's command-line client, a plain HTTP client of the REST API
(/api/v1/). It never imports the portal's Django code, so it runs on any laptop with the
package installed and a token."""
