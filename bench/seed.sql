-- The benchmark store, tenant `bench`: 1,000 workers, 10,000 threads (2 owners, 20 events each),
-- 100,000 triggers (payloads 200 B - 64 KB, one in twenty over 8 KB), 20,000 reports citing them,
-- one thread with 1,000,000 events (thr_big) and one with 10 (thr_ten), a 41 KB payload (trg_b41k).
-- Written straight to the tables as the owner: seeding through HTTP would take longer than the bench.
BEGIN;
INSERT INTO tenants (id) VALUES ('bench') ON CONFLICT DO NOTHING;

INSERT INTO workers (tenant_id, id, name, summary, request_hash)
SELECT 'bench', 'wkr_b' || g, 'worker ' || g, 'bench worker number ' || g, '\x' FROM generate_series(1, 1000) g;

INSERT INTO threads (tenant_id, id, title, summary, status, request_hash, last_seq)
SELECT 'bench', 'thr_b' || g, 'bench thread ' || g, 'PR #' || g || ': a bench thread with twenty events',
       'open', '\x', 20
FROM generate_series(1, 10000) g;

INSERT INTO thread_owners (tenant_id, thread_id, worker_id)
SELECT 'bench', 'thr_b' || g, 'wkr_b' || (1 + g % 1000) FROM generate_series(1, 10000) g
UNION ALL
SELECT 'bench', 'thr_b' || g, 'wkr_b' || (1 + (g + 500) % 1000) FROM generate_series(1, 10000) g;

INSERT INTO thread_events (tenant_id, thread_id, seq, type, summary, ref)
SELECT 'bench', 'thr_b' || t, s, 'note', 'event ' || s || ' of thread ' || t || ': something happened', NULL
FROM generate_series(1, 10000) t, generate_series(1, 20) s;

INSERT INTO triggers (tenant_id, id, source, thread_id, summary, content_type, payload, payload_sha256,
                      request_hash, occurred_at)
SELECT 'bench', 'trg_b' || g, 'github.check_run', 'thr_b' || (1 + g % 10000), 'CI run ' || g || ' finished',
       'text/plain', p, sha256(p), '\x', now()
FROM (
    SELECT g, substring(convert_to(repeat(md5(g::text) || E'\n', 2100), 'UTF8')
                        FROM 1 FOR CASE WHEN g % 20 = 0 THEN 8192 + (g * 7919) % 57344 ELSE 200 + (g * 131) % 1800 END) AS p
    FROM generate_series(1, 100000) g
) x;

INSERT INTO triggers (tenant_id, id, source, thread_id, summary, content_type, payload, payload_sha256,
                      request_hash, occurred_at)
SELECT 'bench', 'trg_b41k', 'github.check_run', 'thr_b1', 'CI failed: 41 KB log', 'text/plain', p, sha256(p), '\x', now()
FROM (SELECT substring(convert_to(repeat('PASSED payments/test_ledger.py::test_case ' || E'\n', 1000), 'UTF8')
                       FROM 1 FOR 41984) AS p) x;

INSERT INTO trigger_neighbours (tenant_id, trigger_id, position, neighbour_id)
SELECT 'bench', 'trg_b' || g, 1, 'trg_b' || (g - 1) FROM generate_series(2, 100000) g;

INSERT INTO reports (tenant_id, id, worker_id, thread_id, summary, content_type, body, body_sha256, request_hash)
SELECT 'bench', 'rpt_b' || g, 'wkr_b' || (1 + g % 1000), 'thr_b' || (1 + g % 10000), 'report ' || g || ': fixed it',
       'text/plain', convert_to('findings of report ' || g, 'UTF8'), sha256(convert_to('findings of report ' || g, 'UTF8')),
       '\x'
FROM generate_series(1, 20000) g;

INSERT INTO report_refs (tenant_id, report_id, position, trigger_id)
SELECT 'bench', 'rpt_b' || g, 1, CASE WHEN g % 1000 = 1 THEN 'trg_b41k' ELSE 'trg_b' || g END
FROM generate_series(1, 20000) g;

-- the counts the server keeps on the worker row as it inserts owners and reports
UPDATE workers w SET
    threads_total = (SELECT count(*) FROM thread_owners o WHERE o.tenant_id = w.tenant_id AND o.worker_id = w.id),
    reports_total = (SELECT count(*) FROM reports r WHERE r.tenant_id = w.tenant_id AND r.worker_id = w.id)
WHERE w.tenant_id = 'bench';

INSERT INTO threads (tenant_id, id, title, summary, status, request_hash, last_seq)
VALUES ('bench', 'thr_big', 'a thread of notes', 'the same title and summary in both', 'open', '\x', 1000000),
       ('bench', 'thr_ten', 'a thread of notes', 'the same title and summary in both', 'open', '\x', 10),
       ('bench', 'thr_hot', 'the hot thread', 'concurrent appends land here', 'open', '\x', 0);

-- Notes spread over many threads (append_many_threads): their own, so the read scenarios' views stay as seeded.
INSERT INTO threads (tenant_id, id, title, summary, status, request_hash, last_seq)
SELECT 'bench', 'thr_n' || g, 'note thread ' || g, 'notes from many agents land here', 'open', '\x', 0
FROM generate_series(1, 1000) g;

INSERT INTO thread_events (tenant_id, thread_id, seq, type, summary, ref)
SELECT 'bench', 'thr_big', s, 'note', 'event ' || s || ': something happened', NULL
FROM generate_series(1, 1000000) s;

INSERT INTO thread_events (tenant_id, thread_id, seq, type, summary, ref)
SELECT 'bench', 'thr_ten', s, 'note', 'event ' || s || ': something happened', NULL
FROM generate_series(1, 10) s;
-- the heads the server keeps on thread and worker rows (schema version 4) as it appends and assigns
UPDATE threads SET head_events = recall_head_events(tenant_id, id), head_owners = recall_head_owners(tenant_id, id)
WHERE tenant_id = 'bench';
UPDATE workers SET head_threads = recall_worker_head_threads(tenant_id, id),
                   head_reports = recall_worker_head_reports(tenant_id, id)
WHERE tenant_id = 'bench';
COMMIT;
ANALYZE;
