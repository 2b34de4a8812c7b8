-- Commits for bench/catalog.py, sent by wrk: `wrk -t N -c N -s catalog_commits.lua URL -- <per table: path,
-- template, first, last, sequence>...`. One connection per wrk thread, so each thread's commits are sequential
-- and it commits to its own table: it fills the bench's commit body (a JSON template with @NAME@ placeholders,
-- built by bench/catalog.py) with the next snapshot id on top of the last one, and moves on when a commit
-- answers 200 (anything else is counted by wrk as a non-2xx response, which fails the run).

local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("index", threads)
end

function init(args)
  local at = (index - 1) * 5
  path, template = args[at + 1], args[at + 2]
  first, last, sequence = tonumber(args[at + 3]), tonumber(args[at + 4]), tonumber(args[at + 5])
  headers = { ["Content-Type"] = "application/json" }
  started = os.time() * 1000
end

local function int(value)
  return string.format("%.0f", value)
end

function request()
  local id = last + 1
  local values = {
    ID = int(id), PARENT = int(last), SEQUENCE = int(sequence + 1), FIRST = int(first),
    TOTAL = int(1000 * id), EPOCH = int(id), TIMESTAMP = int(started + id),
  }
  local body = template:gsub("@(%u+)@", values)
  return wrk.format("POST", path, headers, body)
end

function response(status)
  if status == 200 then
    first, last, sequence = first + 1, last + 1, sequence + 1
  end
end
