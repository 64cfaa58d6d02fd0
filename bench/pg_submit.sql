-- One durable submit as the server writes it on PostgreSQL (the epoch check, the job, its
-- task, its event), for pgbench: the anchor bench/api_peaks measures beside the server.
BEGIN;
SELECT epoch FROM leader WHERE id = 1 FOR SHARE;
INSERT INTO jobs(user_id,name,kind,state,reason,spec_json,priority,replicas,max_restarts,restarts,stop_state,stop_reason,created_ms,updated_ms,started_ms,finished_ms) VALUES (1,'queued','training','PENDING','','{"command":["true"]}',0,1,0,0,'','',0,0,0,0) RETURNING id AS jid \gset
INSERT INTO tasks(job_id,rank,state,reason,node_id,attempt,desired,cpu_milli,memory_bytes,gpus,created_ms,started_ms,finished_ms) VALUES (:jid,0,'PENDING','',0,0,'run',100,16777216,1,0,0,0);
INSERT INTO events(job_id,task_id,rank,ts_ms,from_state,to_state,reason) VALUES (:jid,0,-1,0,'','PENDING','submitted by bench');
COMMIT;
