package testutil

// AdminSite is the body of a site with a zone keyed by an API key and one
// by the client ID, whose response is the client ID.
const AdminSite = `
	tollgate {
		zone api {
			limit 5 1h
			key {http.request.header.X-API-Key}
		}
		zone site {
			limit 100 1h
		}
	}
	respond "{http.tollgate.client_id}"`

// DocSite is the body of a site with the zones of docs/admin-api.md.
const DocSite = `
	tollgate {
		tier_from {http.request.header.X-User-Tier}
		zone api {
			limit 100 1m
			key {http.request.header.X-User}
			match {
				path /api/*
			}
		}
		zone credits {
			limit 1000 1h
			key {http.request.header.X-User}
			tier pro 10000
			tier premium 50000
			match {
				path /credits/*
			}
		}
		zone rooms {
			concurrent 4
			key {http.request.header.X-User}
			tier pro 32
			lease {http.request.header.X-Room-Id}
			ttl 15m
			match {
				path /rooms/*
			}
		}
	}
	respond "ok"`
