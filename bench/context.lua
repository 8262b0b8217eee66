-- wrk script: POST /v1/context with a small JSON body.
wrk.method = "POST"
wrk.body = '{"text":"What should I do next?","session_id":"s-42"}'
wrk.headers["Content-Type"] = "application/json"
