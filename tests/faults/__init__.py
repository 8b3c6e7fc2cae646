"""Fault tests, judged by comparing article-id sets (outputs ∪ dead letters = input): hostile input (every kind of
bad message, from a fixed seed) through a real learner, and faults injected into real ``topicstream`` processes
(``kill -9`` of the learner under load with each kernel, the online HDP making topic-hygiene moves meanwhile;
Redis killed and restarted empty; the broker paused; a standby learner taking over; corrupt snapshots)."""
